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


def _labelled(name: str, config: Any, seed: int):
    from . import build_dataset
    from .partition import PartitionSpec

    return build_dataset(
        name,
        clients=config.num_clients,
        partition=PartitionSpec(**config.partition.model_dump()),
        seed=seed,
        root=config.root,
        download=config.download,
        standin=config.standin,
        n_train=config.n_train,
        n_test=config.n_test,
        test_fraction=config.test_fraction,
    )


def digits(config: Any, seed: int):
    """scikit-learn's 8x8 digits, partitioned by ``data.partition``."""
    return _labelled("digits", config, seed)


def mnist(config: Any, seed: int):
    """MNIST (LeCun et al. 1998), partitioned by ``data.partition``."""
    return _labelled("mnist", config, seed)


def fashion_mnist(config: Any, seed: int):
    """Fashion-MNIST (Xiao et al. 2017), partitioned by ``data.partition``."""
    return _labelled("fashion_mnist", config, seed)


def cifar10(config: Any, seed: int):
    """CIFAR-10 (Krizhevsky 2009), partitioned by ``data.partition``."""
    return _labelled("cifar10", config, seed)


def cifar100(config: Any, seed: int):
    """CIFAR-100 (Krizhevsky 2009), partitioned by ``data.partition``."""
    return _labelled("cifar100", config, seed)


def tinyimagenet(config: Any, seed: int):
    """Tiny ImageNet (200 classes, 64x64), partitioned by ``data.partition``."""
    return _labelled("tinyimagenet", config, seed)
