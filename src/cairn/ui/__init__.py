"""The cairn dashboard (``cairn ui``): batches, tasks, steps, operations, stalls,
metrics, with retry and cancel buttons. Standard library only."""
