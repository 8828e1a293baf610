"""fedsim's own datasets as registered factories: ``factory(config, seed)``.

``config`` is the scenario's ``data`` section, ``seed`` the data seed. Each returns what the engine
consumes: a partitioned :class:`~fedsim.data.Dataset`, a :class:`~fedsim.data.SyntheticPopulation`
(clients generated on demand), a :class:`~fedsim.data.FederatedData` (a user's dataset), or for
the quadratic problem a :class:`~fedsim.data.quadratic.QuadraticProblem`. They are registered in
:data:`fedsim.registries.DATASETS` as a plug-in's would be.
"""

from __future__ import annotations

from typing import Any

from .quadratic import QuadraticProblem

__all__ = ["quadratic", "synthetic", "digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "tinyimagenet"]


def quadratic(config: Any, seed: int) -> QuadraticProblem:
    """FedNova's quadratic problem (Lemma 1): client centers (given or drawn) and weights p_i."""
    return QuadraticProblem.from_config(config, seed)


def synthetic(config: Any, seed: int):
    """Synthetic(alpha, beta) of FedProx (Li et al. 2020), clients generated on demand."""
    from . import SyntheticPopulation

    return SyntheticPopulation(config.alpha, config.beta, clients=config.num_clients, seed=seed, iid=config.iid)


#: The ``data`` keys a labelled dataset reads (besides clients and partition).
_LABELLED_KEYS = ("root", "download", "standin", "n_train", "n_test", "test_fraction")


def _labelled(name: str, doc: str):
    """The factory of labelled dataset ``name``: its training set split by ``data.partition``."""

    def factory(config: Any, seed: int):
        from . import build_dataset
        from .partition import PartitionSpec

        return build_dataset(name, clients=config.num_clients, partition=PartitionSpec(**config.partition.model_dump()),
                             seed=seed, **{k: getattr(config, k) for k in _LABELLED_KEYS})

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"{doc}, partitioned by ``data.partition``."
    return factory


digits = _labelled("digits", "scikit-learn's 8x8 digits")
mnist = _labelled("mnist", "MNIST (LeCun et al. 1998)")
fashion_mnist = _labelled("fashion_mnist", "Fashion-MNIST (Xiao et al. 2017)")
cifar10 = _labelled("cifar10", "CIFAR-10 (Krizhevsky 2009)")
cifar100 = _labelled("cifar100", "CIFAR-100 (Krizhevsky 2009)")
tinyimagenet = _labelled("tinyimagenet", "Tiny ImageNet (200 classes, 64x64)")
