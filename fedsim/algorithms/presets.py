"""Registry of named algorithms: presets over one composable space.

An algorithm is a local solver (SGD with optional momentum / prox / weight decay, or Adam /
AMSGrad), an optional local correction (SCAFFOLD control variates, FedNova-VR, FedCM / FedLADA
amended direction), an aggregation (plain weighted average or FedNova normalization) and a server
optimizer. A preset fills the parts a scenario leaves unset; every part can be overridden.

``PRESETS`` are fedsim's own; they are registered in :data:`fedsim.registries.ALGORITHMS` by
:mod:`fedsim.registries`, exactly as a user's preset is registered, and
``resolve`` looks every name up there. A preset maps part names (the keys of ``BASE``) to values;
parts it leaves out are ``BASE``'s.
"""

from __future__ import annotations

from types import MappingProxyType

__all__ = ["PRESETS", "BASE"]

#: The parts every preset starts from (a synchronous FedAvg).
BASE = MappingProxyType(dict(
    solver="sgd",
    momentum=0.0,
    mu=0.0,
    correction="none",
    amend=1.0,
    aggregation="avg",
    tau_eff="a_norm",
    server_opt="sgd",
    server_lr=1.0,
    server_momentum=0.0,
    server_betas=(0.9, 0.999),
    server_eps=1e-3,
    share_vhat=False,
    asynchronous=None,
))


def _p(**kw):
    d = dict(BASE)
    d.update(kw)
    return MappingProxyType(d)


PRESETS = MappingProxyType(
    {
        # McMahan et al. 2017: average of local SGD models.
        "fedavg": _p(),
        # Wang et al. 2020 (FedNova), eq. (7): normalize Delta_i by ||a_i||_1, rescale by tau_eff.
        "fednova": _p(aggregation="nova"),
        # Li et al. 2020 (FedProx): local objective + mu/2 ||x - x^t||^2.
        "fedprox": _p(mu=0.01),
        # FedNova with the proximal local solver; tau_eff = sum p_i tau_i as in the paper.
        "fednova_prox": _p(mu=0.01, aggregation="nova", tau_eff="tau"),
        # Karimireddy et al. 2020 (SCAFFOLD), option II control variates.
        "scaffold": _p(correction="scaffold"),
        # Liang et al. 2019 (VRL-SGD): SCAFFOLD-style correction assuming equal steps.
        "vrlsgd": _p(correction="vrlsgd"),
        # FedNova Appendix H: variance reduction with c_i = d_i^{t-1}.
        "fednova_vr": _p(aggregation="nova", correction="nova_vr"),
        # Hsu et al. 2019 (FedAvgM): server momentum on the averaged update.
        "fedavgm": _p(server_opt="momentum", server_momentum=0.9),
        # Reddi et al. 2021 (Adaptive Federated Optimization).
        "fedadam": _p(server_opt="adam", server_lr=0.1),
        "fedyogi": _p(server_opt="yogi", server_lr=0.1),
        "fedadagrad": _p(server_opt="adagrad", server_lr=0.1),
        # Xu et al. 2021 (FedCM): local step along alpha g + (1 - alpha) Delta^t.
        "fedcm": _p(correction="fedcm", amend=0.1),
        # Sun et al. 2023: local AMSGrad, server averages models and v_hat.
        "localadam": _p(solver="amsgrad", share_vhat=True),
        # Sun et al. 2023 (FedLADA): local AMSGrad amended by the global direction g_a.
        "fedlada": _p(solver="amsgrad", share_vhat=True, correction="lada", amend=0.05),
        # Nguyen et al. 2022 (FedBuff): buffered asynchronous aggregation.
        "fedbuff": _p(asynchronous="fedbuff"),
        # Xie et al. 2019 (FedAsync): x <- (1 - a_s) x + a_s x_new.
        "fedasync": _p(asynchronous="fedasync"),
    }
)
