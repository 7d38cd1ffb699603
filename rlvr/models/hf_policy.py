"""Preparing a Hugging Face policy for RL: dtype, device, gradient checkpointing, LoRA,
the reference policy, and chat-template prompts.

`prepare_policy` runs on the model `load_policy` returned. With LoRA the trainer holds
the adapted model itself (peft injects the adapters in place), only adapter weights
train, and the reference policy π_ref is the *same* module with its adapters switched
off (`AdapterDisabledReference`): at step 0 the adapters' B matrices are zero, so π_ref
is exactly the initial policy, with no second copy of the weights. A checkpoint keeps the
adapter apart (`save_adapter`, peft's format); a resumed run rebuilds the policy from the
original base and loads it (`load_adapter`), so π_ref is again the untouched base.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from rlvr.models.policy_options import PolicyOptions

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def prepare_policy(model: torch.nn.Module, options: PolicyOptions) -> tuple[torch.nn.Module, dict]:
    """`model` cast to `options.dtype`, moved to `options.device`, with gradient
    checkpointing and LoRA adapters as asked. Returns (model in train mode, info)."""
    model = model.to(device=options.device, dtype=_DTYPES[options.dtype])
    if options.gradient_checkpointing:
        # Non-reentrant checkpointing needs no input gradients, so frozen embeddings
        # (LoRA) still get adapter gradients.
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # the newer transformers name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    info: dict[str, Any] = {"dtype": options.dtype, "device": options.device}
    if options.lora is not None:
        model = add_lora(model, options)
        info["trainable_parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    model.train()
    return model, info


def add_lora(model: torch.nn.Module, options: PolicyOptions) -> torch.nn.Module:
    """Inject peft LoRA adapters into `model` in place; returns the adapted model (not the
    PeftModel wrapper, so the trainer's forward pass is unchanged)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as err:
        raise ImportError("policy.lora needs peft: pip install 'rlvr[hf]'") from err
    lora = options.lora
    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        # peft's causal-LM wrapper hooks `prepare_inputs_for_generation`, which the tiny VLM
        # (rlvr.vision) does not have; the adapters injected are the same, and rlvr keeps
        # the adapted model, not the wrapper.
        task_type="CAUSAL_LM" if hasattr(model, "prepare_inputs_for_generation") else None,
        # Never the LM head, which rlvr's float32 head reads as its base weight
        # (policy_options.py): peft's "all-linear" leaves it out only for a transformers
        # PreTrainedModel. Nor what the model keeps frozen (rlvr.vision.qwen_vl: the vision
        # tower of a Qwen2-VL, whose LoRA adapts the language side).
        exclude_modules=_output_layer(model) + list(getattr(model, "lora_frozen_modules", []))
        or None,
    )
    try:
        with warnings.catch_warnings():
            # peft (0.21) reads transformers' deprecated `is_gradient_checkpointing` alias
            # while wrapping; rlvr never reads it (`rlvr.models.modes.checkpointing`).
            warnings.filterwarnings(
                "ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning
            )
            peft_model = get_peft_model(model, config)
    except ValueError as err:
        raise ValueError(f"policy.lora.target_modules={lora.target_modules!r}: {err}") from err
    return peft_model.get_base_model()


def _output_layer(model: torch.nn.Module) -> list[str]:
    """The module name of `model`'s output embedding (for peft's `exclude_modules`)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return [name for name, module in model.named_modules() if head is not None and module is head]


def lora_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The peft adapter layers inside `model` (empty for a plain model or without peft)."""
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return []
    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


@contextmanager
def adapters_disabled(model: torch.nn.Module) -> Iterator[None]:
    """Run `model` as its base model: every adapter off inside the block, back on after."""
    layers = lora_layers(model)
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


class _DisabledForward:
    def __init__(self, owner: torch.nn.Module, module: torch.nn.Module) -> None:
        self.owner, self.module = owner, module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with adapters_disabled(self.owner):
            return self.module(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)


class AdapterDisabledReference:
    """π_ref as a view of a LoRA policy with its adapters off; quacks like the model for
    `response_logprobs` (base_model, get_output_embeddings, parameters, config)."""

    adapters_enabled = False  # read by the fused forward, which reads weights, not calls

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    @property
    def base_model(self) -> _DisabledForward:
        return _DisabledForward(self.model, self.model.base_model)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _DisabledForward(self.model, self.model)(*args, **kwargs)

    def eval(self) -> AdapterDisabledReference:
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def reference_policy(model: torch.nn.Module) -> Any:
    """π_ref: the adapter-disabled view of a LoRA policy, else a frozen deep copy."""
    if lora_layers(model):
        return AdapterDisabledReference(model)
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The policy's weights with LoRA merged in (W + (α/r)·B·A) under the base model's key
    names, without copying the model: what a checkpoint or an inference engine needs."""
    adapted = set(lora_layers(model))
    layers = {name: m for name, m in model.named_modules() if m in adapted}
    state = {}
    for key, value in model.state_dict().items():
        if ".lora_" in key:
            continue
        state[key.replace(".base_layer.", ".")] = value
    for name, layer in layers.items():
        adapters = [a for a in layer.active_adapters if a in getattr(layer, "lora_A", {})]
        if layer.disable_adapters or not adapters:
            continue
        weight = state[f"{name}.weight"]
        delta = sum(layer.get_delta_weight(a) for a in adapters)
        state[f"{name}.weight"] = (weight.float() + delta.float()).to(weight.dtype)
    return state


def save_kwargs(model: torch.nn.Module) -> dict[str, Any]:
    """Extra `save_pretrained` arguments: a LoRA policy is saved merged, loadable as is."""
    return {"state_dict": merged_state_dict(model)} if lora_layers(model) else {}


ADAPTER = "default"  # the name add_lora's adapter gets in peft
_PEFT_PREFIX = "base_model.model."  # keys of a PeftModel's saved adapter start with it


def save_adapter(model: torch.nn.Module, directory: Path) -> None:
    """The LoRA adapter of `model` saved in peft's format (adapter_config.json,
    adapter_model.safetensors), as written in the model: loadable onto the base model with
    `peft.PeftModel.from_pretrained`. Adapters only: rlvr never adapts the embeddings or
    the LM head, which peft's "auto" would copy in whole (with a warning) wherever the
    resolved "all-linear" names hold `lm_head`, as a Qwen2-VL's do."""
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.peft_config[ADAPTER].save_pretrained(directory)
    state = get_peft_model_state_dict(model, adapter_name=ADAPTER, save_embedding_layers=False)
    tensors = {_PEFT_PREFIX + k: v.detach().contiguous().cpu() for k, v in state.items()}
    save_file(tensors, directory / "adapter_model.safetensors")


def load_adapter(model: torch.nn.Module, directory: Path) -> None:
    """Copy the adapter `save_adapter` wrote in `directory` into the LoRA policy `model`,
    whose adapters must have the same names and shapes (same rank and target modules)."""
    from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
    from safetensors.torch import load_file

    saved = load_file(Path(directory) / "adapter_model.safetensors")
    state = {k.removeprefix(_PEFT_PREFIX): v for k, v in saved.items()}
    wanted = get_peft_model_state_dict(model, adapter_name=ADAPTER, save_embedding_layers=False)
    differ = sorted(
        k
        for k in set(state) | set(wanted)
        if k not in state or k not in wanted or state[k].shape != wanted[k].shape
    )
    if differ:
        raise ValueError(
            f"the LoRA adapter in {directory} does not fit the policy's adapters "
            f"(policy.lora rank or target_modules differ): first mismatch {differ[0]!r}"
        )
    set_peft_model_state_dict(model, state, adapter_name=ADAPTER)


def chat_prompt(
    tokenizer: Any, prompt: str, options: PolicyOptions, tools: list | None = None
) -> str:
    """`prompt` as a user turn (after an optional system turn) rendered by the tokenizer's
    chat template, ending with the assistant's generation prompt; `tools` (JSON schemas)
    are declared to the template as `tools=`."""
    hf = getattr(tokenizer, "hf_tokenizer", None)
    if hf is None or not getattr(hf, "chat_template", None):
        raise ValueError(
            "policy.chat_template is true but the tokenizer has no chat template; "
            "set policy.chat_template: false or use an instruct model's tokenizer"
        )
    messages = [{"role": "user", "content": prompt}]
    if options.system_prompt:
        messages.insert(0, {"role": "system", "content": options.system_prompt})
    extra = {}
    if options.enable_thinking is not None and "enable_thinking" in str(hf.chat_template):
        extra["enable_thinking"] = options.enable_thinking
    if tools:
        extra["tools"] = tools
    return hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)


def chat_formatted(
    task: Any, tokenizer: Any, options: PolicyOptions, tools: list | None = None
) -> Any:
    """`task` whose problems' prompts are rendered with the chat template, declaring
    `tools` (same task object, so reward functions and verifiers are untouched)."""
    if not options.chat_template:
        return task
    if tools:
        warn_if_tools_dropped(tokenizer, options, tools)
    original = task.problems

    def problems(split: str) -> list:
        return [
            replace(p, prompt=chat_prompt(tokenizer, p.prompt, options, tools))
            for p in original(split)
        ]

    task.problems = problems
    return task


def warn_if_tools_dropped(tokenizer: Any, options: PolicyOptions, tools: list) -> None:
    """Warn when the chat template renders a prompt the same with and without `tools=`: it
    drops their declaration (SmolLM2's does, silently), so the model is never told about
    them. Unless `policy.system_prompt` names every tool already (the remedy applied)."""
    probe = "?"
    if chat_prompt(tokenizer, probe, options, tools) != chat_prompt(tokenizer, probe, options):
        return
    names = [t.get("function", t).get("name", "?") for t in tools]
    if options.system_prompt and all(n in options.system_prompt for n in names):
        return
    warnings.warn(
        f"the chat template ignores tools=: the prompt is the same with and without the "
        f"tools {names}, so the model is not told about them; declare them in "
        f"policy.system_prompt, with an example call in the tool_format's syntax",
        stacklevel=3,
    )
