"""cairn's engine: running one task durably, from its claim to its outcome.

The modules, in the order a task passes through them (docs/architecture.md):

- ``claim``: the one claim path (orphans first, then pending work), with
  ``owners`` (who owns a task, whether a claimant is gone) and ``leases`` (the
  keeper that renews them);
- ``execute``: runs one claimed task from a frozen ``config.EngineConfig``;
- ``run``: ``TaskRun``, the only place that writes a task's history, and the
  two drivers (``drive``, ``adrive``) that carry out its machines' effects;
- ``steps``: steps, recorded inputs, durable sleeps; ``waits``: ``wait_for``
  and signals; ``once``: operations; ``fanout``: ``map``; ``children``:
  spawn and join; ``permits``: shared-limit permits around a call;
- ``batch``: a batch run on the threads or coroutines of one process.

Nothing here imports ``cairn.app`` or ``cairn.context`` (the ``.importlinter``
contracts hold it): the app builds the config, the context hands its calls to
these modules.
"""
