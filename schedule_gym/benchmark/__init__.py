"""The generalisation benchmark: fixed protocols (training and held-out tasks, budget, seeds, metric) and
the runner that turns an agent or a trained policy into a leaderboard row, on one machine or on a Ray
cluster.

Layered bottom to top: :mod:`~schedule_gym.benchmark.protocol` (the protocols as data),
:mod:`~schedule_gym.benchmark.aggregate` (the median and IQM with stratified-bootstrap intervals),
:mod:`~schedule_gym.benchmark.references` (reference latencies and their cache),
:mod:`~schedule_gym.benchmark.policy` (loading a saved policy without unpickling),
:mod:`~schedule_gym.benchmark.tuners` (an agent or a policy as a tuner), :mod:`~schedule_gym.benchmark.ray_fanout`
(runs as Ray tasks) and :mod:`~schedule_gym.benchmark.runs` (:func:`run_protocol`, the row).
"""

from schedule_gym.benchmark.aggregate import aggregate_iqm, aggregate_median, stratified_bootstrap_interval
from schedule_gym.benchmark.policy import load_policy
from schedule_gym.benchmark.protocol import PROTOCOLS, Protocol, get_protocol
from schedule_gym.benchmark.references import reference_latency
from schedule_gym.benchmark.runs import RAY_TIMEOUT_S, run_protocol
from schedule_gym.benchmark.tuners import AgentTuner, PolicyTuner, agent_tuner, policy_tuner

__all__ = ["PROTOCOLS", "RAY_TIMEOUT_S", "AgentTuner", "PolicyTuner", "Protocol", "agent_tuner", "aggregate_iqm",
           "aggregate_median", "get_protocol", "load_policy", "policy_tuner", "reference_latency", "run_protocol",
           "stratified_bootstrap_interval"]
