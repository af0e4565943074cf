"""Baselines and the comparison harness; installed as ``schedule_gym.baselines``.

This folder is mapped into the ``schedule_gym`` namespace by ``pyproject.toml`` (an installed top-level
``baselines`` package would shadow OpenAI Baselines). Import it as ``schedule_gym.baselines``.
"""
