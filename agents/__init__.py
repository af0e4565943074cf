"""Search agents that tune through the environment; installed as ``schedule_gym.agents``.

This folder is mapped into the ``schedule_gym`` namespace by ``pyproject.toml`` (an installed top-level
``agents`` package would shadow the OpenAI Agents SDK). Import it as ``schedule_gym.agents``.
"""
