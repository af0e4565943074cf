"""The mock backend: an analytic latency model of the tiled loop nest on a CPU.

* :mod:`~schedule_gym.backends.mock.profile`: :class:`CPUProfile` and :class:`CacheLevel`, their JSON files;
* :mod:`~schedule_gym.backends.mock.selection`: the shipped profiles (``profiles/<name>.json``) and which
  one ``profile="auto"`` picks on this machine;
* :mod:`~schedule_gym.backends.mock.model`: the model (:func:`mock_latency_s`);
* :mod:`~schedule_gym.backends.mock.backend`: :class:`MockBackend` and its latency table.
"""
