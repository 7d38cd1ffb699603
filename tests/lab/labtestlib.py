"""What the agentic-rl-lab tests share: where the lab and its Python packages are, the tiny
Qwen2 they train (a ChatML template, warmed so that rewards are mixed), the local data
files the scripts read through their own flags, the server, and a script runner.

Shims are environment variables, local data files and the scripts' own flags only: the
scripts are read from the lab's folder and never edited, patched or monkeypatched.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from hf_testlib import CHAT_TEMPLATE, SPECIAL, tiny_qwen2

REPO = Path(__file__).parents[2]
LAB = Path(os.environ.get("RLVR_AGENTIC_RL_LAB", REPO.parent / "shared" / "agentic-rl-lab"))
LAB_SITE = REPO / ".venv" / "lab"  # tests/lab/requirements-lab.txt, installed by make setup
PYTRIO_029 = REPO / ".venv" / "pytrio-0.2.9"
STUDENT, TEACHER = "Qwen/Qwen3.5-4B", "Qwen/Qwen3.6-27B"  # the lab's default names

SUFFIX_01 = " Provide a numerical answer without units, written inside \\boxed{}."
FEWSHOT_01 = [
    {"role": "user", "content": "How many r's are in strawberry?" + SUFFIX_01},
    {
        "role": "assistant",
        "content": (
            "<think>\n\n</think>\n\nLet's spell the word out and number all the letters: "
            "1) s 2) t 3) r 4) a 5) w 6) b 7) e 8) r 9) r 10) y. We have r's at positions "
            "3, 8, and 9. There are three r's. \\boxed{3}"
        ),
    },
]  # 01-grpo's few-shot, copied here so the tokenizer learns its merges
SUFFIX_DAPO = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
QUESTIONS = [f"Ann has {k} pears and {4 - k} plums. How many fruits?" for k in range(5)]
# Texts of the lab's other prompts, read at test time, for the tokenizer's merges.
RETOOL_SYSTEM = (
    (LAB / "05-retool" / "protocol.py").read_text().split('SYSTEM_PROMPT = """')[-1].split('"""')[0]
    if (LAB / "05-retool" / "protocol.py").is_file()
    else ""
)
OPSD_TEXT = "Problem: Here is a reference solution to this problem:\n=== Reference Solution Begin ===\n=== Reference Solution End ===\n"
MEDICAL_TEXT = "以下是中国考试中的单项选择题。请仔细思考，并只输出最终答案选项字母。题目：答案："
WARM_STEPS = 40


def lab_missing() -> str | None:
    """Why the lab tests cannot run here, or None."""
    if not (LAB / "07-gspo" / "train.py").is_file():
        return f"agentic-rl-lab is not at {LAB} (set RLVR_AGENTIC_RL_LAB)"
    if not (LAB_SITE / "swanlab").is_dir():
        return f"the lab's packages are not in {LAB_SITE}: run make setup"
    try:
        import pytrio  # noqa: F401
    except ImportError:
        return "pytrio 0.2.8 is not installed (pip install -e '.[test]')"
    return None


# The model --------------------------------------------------------------------------------


def prompts_01(tokenizer, question: str) -> list[int]:
    messages = [*FEWSHOT_01, {"role": "user", "content": question + SUFFIX_01}]
    return _chat(tokenizer, messages)


def prompts_dapo(tokenizer, question: str) -> list[int]:
    return _chat(tokenizer, [{"role": "user", "content": question.strip() + SUFFIX_DAPO}])


def _chat(tokenizer, messages: list[dict]) -> list[int]:
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    return tokenizer.encode(text, add_special_tokens=False)


def build_models(directory: Path) -> tuple[Path, Path]:
    """(warm, raw): a random 2-layer Qwen2 (a 2048-position context, a byte-level BPE of
    1024 tokens learnt on the lab's own prompt texts, ChatML) and a copy fine-tuned
    through rlvr.service (cross_entropy, full weights) to answer \\boxed{4} or
    \\boxed{5}, about half each, after 01-grpo's, 05-retool's and 06/07's prompts. Every
    question's answer is 4, so a group's rewards are mixed. Built once per test session;
    a file lock shares it between pytest workers."""
    directory.mkdir(parents=True, exist_ok=True)
    raw, warm = directory / "raw", directory / "warm"
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (warm / "config.json").is_file():
            _build_raw(raw)
            _warm(raw, warm, directory / "service")
    return warm, raw


def _build_raw(raw: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [m["content"] for m in FEWSHOT_01] + [RETOOL_SYSTEM, OPSD_TEXT, MEDICAL_TEXT]
    texts += [q + SUFFIX_01 for q in QUESTIONS] + [q + SUFFIX_DAPO for q in QUESTIONS]
    texts += [CHAT_TEMPLATE, "\\boxed{4}", "\\boxed{5}"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts * 3, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|pad|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    model = tiny_qwen2(tokenizer, max_positions=2048, seed=0)
    model.save_pretrained(raw)
    tokenizer.save_pretrained(raw)


def _warm(raw: Path, warm: Path, root: Path) -> None:
    from transformers import AutoTokenizer

    from rlvr.service import AdamParams, Datum, ModelInput, ServiceClient

    tokenizer = AutoTokenizer.from_pretrained(str(raw))
    datums = []
    for question in QUESTIONS[:2]:
        retool = [
            {"role": "system", "content": RETOOL_SYSTEM},
            {"role": "user", "content": question},
        ]
        for prompt in (
            prompts_01(tokenizer, question),
            prompts_dapo(tokenizer, question),
            _chat(tokenizer, retool),
        ):
            for answer in ("4", "5"):
                target = tokenizer.encode(
                    f"\\boxed{{{answer}}}<|im_end|>", add_special_tokens=False
                )
                ids = prompt + target
                weights = [0.0] * (len(prompt) - 1) + [1.0] * len(target)
                inputs = {"target_tokens": ids[1:], "weights": weights}
                datums.append(Datum(ModelInput.from_ints(ids[:-1]), inputs))
    trainer = ServiceClient(root=root).create_training_client(str(raw))
    for _ in range(WARM_STEPS):
        trainer.forward_backward(datums, "cross_entropy").result()
        trainer.optim_step(AdamParams(learning_rate=1e-2)).result()
    Path(trainer.save_weights_for_sampler("warm").result().path).rename(warm)


# Data files the scripts read through their own flags -------------------------------------


def write_math_jsonl(path: Path, n: int = 8) -> Path:
    rows = [
        {
            "id": f"q{i}",
            "question": QUESTIONS[i % len(QUESTIONS)],
            "answer": "4",
            "data_source": "math_dapo",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_gsm8k(cwd: Path) -> None:
    """openai/gsm8k as a local dataset folder that `load_dataset("openai/gsm8k", "main")`
    reads offline from the working directory (a README `configs:` block)."""
    folder = cwd / "openai" / "gsm8k"
    (folder / "main").mkdir(parents=True, exist_ok=True)
    rows = [{"question": q, "answer": "4 fruits\n#### 4"} for q in QUESTIONS]
    for split in ("train", "test"):
        (folder / "main" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n"
        "  - split: train\n    path: main/train.jsonl\n"
        "  - split: test\n    path: main/test.jsonl\n---\n"
    )


# Running a script -------------------------------------------------------------------------


def lab_env(home: Path, url: str, profile: str = "rlvr-local") -> dict[str, str]:
    """The script's environment: the server's profile (written by the server), a fresh
    HOME and datasets cache, offline hubs, the lab's packages first on the path, and no
    bytecode written into the lab's folders."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTRIO_", "HF_"))}
    env.update(
        HOME=str(home),
        PYTRIO_ENV=profile,
        PYTRIO_BASE_URL=url,
        PYTRIO_API_KEY="rlvr-local",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_DATASETS_CACHE=str(home / "hf-datasets"),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=os.pathsep.join([str(LAB_SITE), str(REPO)]),
        OMP_NUM_THREADS="1",
        TQDM_DISABLE="1",
    )
    return env


def run_script(script: str, args: list[str], env: dict, cwd: Path, timeout: float = 600):
    """Run LAB/script with `args`; returns (returncode, output, seconds)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(LAB / script), *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - started


def numbers(pattern: str, text: str) -> list[float]:
    return [float(x) for x in re.findall(pattern, text)]


def lab_snapshot() -> dict[str, float]:
    """Every file under the lab with its mtime: the scripts must leave it as it is."""
    return {str(p): p.stat().st_mtime for p in LAB.rglob("*")}
