"""MageRAG-Chat-v0 as a service for RL trainers: an OpenEnv environment server with bounded memory and typed faults.

Modules, one job each:

- :mod:`~mage_gym.agent.service.models`: the typed Action / Observation / State (OpenEnv's pydantic bases);
- :mod:`~mage_gym.agent.service.environment`: the OpenEnv ``Environment`` of one session (limits, typed errors);
- :mod:`~mage_gym.agent.service.documents`: graphs shared per document per process, a cap, idle eviction;
- :mod:`~mage_gym.agent.service.sessions`: one session table for WebSocket and HTTP sessions;
- :mod:`~mage_gym.agent.service.app`: the ASGI app (routes, limits, reaper, ``/metrics``);
- :mod:`~mage_gym.agent.service.runtime`, :mod:`~mage_gym.agent.service.config`: per-process state and settings;
- :mod:`~mage_gym.agent.service.runner`: a background server (tests) and ``serve`` (workers);
- :mod:`~mage_gym.agent.service.client`: OpenEnv's ``EnvClient`` for this env, with the typed errors;
- :mod:`~mage_gym.agent.service.errors`: the typed errors, one code each.

Needs the ``serve`` extra (openenv-core, which brings FastAPI, uvicorn and websockets).
"""
