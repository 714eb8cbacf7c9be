"""`pipeline.backend=ray`: rollout actors and a trainer actor group behind the pipeline's seam. Nothing here
imports Ray at module level: `specrl` runs without it, and only a run that asks for Ray imports it."""
