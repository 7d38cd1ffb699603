"""Training beyond one process: DDP under torchrun (`ddp`, `data_parallel`), FSDP2 shards
(`fsdp`, `sharded`), choosing a rank's trainer (`ranks`), and the asynchronous Ray pipeline
(`async_pipeline`, `ray_actors`). Normalizers are global counts, so any split of the batch
gives the gradient of one process (docs/distributed.md)."""
