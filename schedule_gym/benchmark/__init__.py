"""The generalisation benchmark: fixed protocols (training and held-out tasks, budget, seeds, metric) and
the runner that turns an agent or a trained policy into a leaderboard row, on one machine or on a Ray
cluster."""

from schedule_gym.benchmark.policy import load_policy
from schedule_gym.benchmark.protocol import (
    PROTOCOLS,
    RAY_TIMEOUT_S,
    AgentTuner,
    PolicyTuner,
    Protocol,
    agent_tuner,
    get_protocol,
    policy_tuner,
    reference_latency,
    run_protocol,
)

__all__ = ["PROTOCOLS", "RAY_TIMEOUT_S", "AgentTuner", "PolicyTuner", "Protocol", "agent_tuner", "get_protocol",
           "load_policy", "policy_tuner", "reference_latency", "run_protocol"]
