"""What one step records: the `Rollout` record that travels from the engine to the loss
(`rollout_record`), the step's metrics computed once from it (`step_metrics`,
`episode_metrics`) and the rows of the completions table (`completion_rows`)."""
