"""The policy the rollouts are sampled from, when it is not the trainer's module itself: a
bf16 or own copy (`precision`), a copy k updates behind (`lag`), and the probe that checks
the sampler and trainer score tokens alike (`sync_probe`)."""
