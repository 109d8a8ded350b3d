"""``executor=ray``: graph builds and benchmark episodes on a Ray cluster (docs/DISTRIBUTED.md).

Why a package of its own: nothing here is imported unless a config says
``executor.name: ray``, so a user who never sets it never imports Ray, and the
local code paths (:mod:`mage_gym.bench.corpus`,
:mod:`mage_gym.bench.benchmark`) keep one small hook each.

- :mod:`.cluster`: join or start the cluster; the settings every worker must share.
- :mod:`.build`: one Ray task per document, graphs written to the shared cache by the task.
- :mod:`.episodes`: episodes sharded over Ray actors, records streamed back to the driver.
"""
