"""Issue 21, compare / plot / validate: grid values go through the scenario loader, grids are capped,
plot's arguments are checked, compare never overwrites strangers' files, and validate refuses what
run would refuse."""

import os

import pytest

from _tiny_runs import QUAD as TINY_QUAD, exit_2
from fedsim.cli import main

QUAD = {**{k: v for k, v in TINY_QUAD.items() if k != "checkpoint"}, "rounds": 2}
LOGREG = {
    "name": "lr",
    "rounds": 2,
    "data": {"name": "synthetic", "clients": 10},
    "model": {"name": "logreg"},
    "round": {"policy": "wait", "local_steps": 2},
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 10},
}


def _exit2(capsys, argv, *needles, seconds=20):
    return exit_2(capsys, argv, *needles, seconds=seconds, max_chars=600)


# --------------------------------------------------------------------------- 9: grid values and size
@pytest.mark.parametrize(
    "value, needle",
    [
        ("&a [*a]", "algorithm.lr"),  # a recursive alias
        ("[" * 20000 + "]" * 20000, "deeper"),
        ("1" * 4300, "algorithm.lr"),
        ("&a [1,1,1,1,1,1,1,1,1]\n", "algorithm.lr"),
    ],
)
def test_grid_values_use_the_scenario_loader(write_yaml, tmp_path, capsys, value, needle):
    sc = write_yaml(QUAD)
    _exit2(capsys, ["compare", str(sc), "--grid", f"algorithm.lr={value}", "--out", str(tmp_path / "c"), "--quiet"], needle)
    assert not (tmp_path / "c").exists()


def test_alias_bomb_in_a_grid_value_is_refused_fast(write_yaml, tmp_path, capsys):
    bomb = "[" + ",".join(["&a0 [1,1,1,1,1,1,1,1,1,1]"] + [f"&a{i} [*a{i-1},*a{i-1},*a{i-1},*a{i-1},*a{i-1},*a{i-1},*a{i-1},*a{i-1},*a{i-1},*a{i-1}]"
                                                          for i in range(1, 9)]) + "]"  # fmt: skip
    sc = write_yaml(QUAD)
    _exit2(capsys, ["compare", str(sc), "--grid", f"algorithm.lr={bomb}", "--out", str(tmp_path / "c"), "--quiet"],
           "--grid algorithm.lr", seconds=10)


def test_a_huge_grid_is_refused_before_any_cell_is_built(write_yaml, tmp_path, capsys):
    sc = write_yaml(QUAD)
    values = ",".join(str(0.001 * (i + 1)) for i in range(1000))
    _exit2(capsys, ["compare", str(sc), "--grid", f"algorithm.lr={values}", "--grid", f"algorithm.batch_size={','.join(map(str, range(1, 1001)))}",
                    "--out", str(tmp_path / "c"), "--quiet"], "1,000,000 runs", seconds=10)  # fmt: skip


# --------------------------------------------------------------------------- 20: strangers' files in compare --out
@pytest.mark.parametrize("name", ["summary.csv", "runs.csv"])
def test_compare_does_not_overwrite_strangers_files(write_yaml, tmp_path, capsys, name):
    sc = write_yaml(QUAD)
    out = tmp_path / "c"
    out.mkdir()
    (out / name).write_text("mine\n")
    _exit2(capsys, ["compare", str(sc), "--out", str(out), "--quiet"], name, "--force")
    assert os.listdir(out) == [name] and (out / name).read_text() == "mine\n"


def test_compare_refuses_a_linked_summary_even_with_force(write_yaml, tmp_path, capsys):
    sc = write_yaml(QUAD)
    out = tmp_path / "c"
    out.mkdir()
    victim = tmp_path / "victim.csv"
    victim.write_text("mine\n")
    os.symlink(victim, out / "summary.csv.tmp")
    _exit2(capsys, ["compare", str(sc), "--out", str(out), "--quiet", "--force"], "summary.csv.tmp", "symbolic link")
    assert victim.read_text() == "mine\n"


def test_compare_reruns_its_own_folder_and_force_replaces_strangers(write_yaml, tmp_path, capsys):
    sc = write_yaml(QUAD)
    out = tmp_path / "c"
    assert main(["compare", str(sc), "--out", str(out), "--quiet"]) == 0
    assert main(["compare", str(sc), "--out", str(out), "--quiet"]) == 0  # its own: resumed, no --force needed
    other = tmp_path / "o"
    other.mkdir()
    (other / "runs.csv").write_text("mine\n")
    assert main(["compare", str(sc), "--out", str(other), "--quiet", "--force"]) == 0
    assert (other / "runs.csv").read_text() != "mine\n"


# --------------------------------------------------------------------------- 19: plot arguments
@pytest.mark.parametrize(
    "args, needle",
    [
        (["--target", "0"], "--target"),
        (["--target", "-1"], "--target"),
        (["--target", "nan"], "--target"),
        (["--target", "inf"], "--target"),
        (["--target", "2"], "--target"),
        (["--dpi", "0"], "--dpi"),
        (["--dpi", "-10"], "--dpi"),
        (["--dpi", "100000"], "--dpi"),
    ],
)
def test_plot_arguments_are_checked(tmp_path, capsys, args, needle):
    (tmp_path / "r").mkdir()
    _exit2(capsys, ["plot", str(tmp_path / "r"), "--out", str(tmp_path / "fig"), *args], needle)
    assert not (tmp_path / "fig").exists()


# --------------------------------------------------------------------------- 18: validate refuses what run refuses
@pytest.mark.parametrize(
    "scenario, needle",
    [
        ({**QUAD, "system": {"compute": {"flops": 1e9}}}, "system.compute: quadratic data"),
        ({**QUAD, "system": {"speed": 1.0, "network": {"down": 1e6, "up": 1e6}}}, "system.network: quadratic data"),
        ({**LOGREG, "system": {"compute": {"flops": [1e9, 2e9]}}}, "system.compute.flops: needs one value per client (10)"),
        ({**LOGREG, "system": {"speed": 1.0, "network": {"down": [1e6, 2e6], "up": 1e6}}},
         "system.network.down: needs one value per client (10)"),
        ({**LOGREG, "system": {"speed": 1.0, "network": {"down": 1e6, "up": [1e6, 2e6]}}},
         "system.network.up: needs one value per client (10)"),
    ],
)
def test_validate_refuses_what_run_refuses(write_yaml, tmp_path, capsys, scenario, needle):
    sc = write_yaml(scenario)
    _exit2(capsys, ["validate", str(sc)], needle)
    _exit2(capsys, ["run", str(sc), "--out", str(tmp_path / "r"), "--quiet"], needle)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("policy", ["wait", "async"])
def test_a_trace_where_nobody_is_ever_online_is_refused_under_wait_and_async(write_yaml, tmp_path, capsys, policy):
    (tmp_path / "off.csv").write_text("client,start,end,online,speed\n0,0,10,0,0\n1,0,10,0,0\n")
    rnd = {"policy": policy, "local_steps": 2, **({"concurrency": 1} if policy == "async" else {})}
    algo = {"name": "fedasync" if policy == "async" else "fedavg", "lr": 0.1, "batch_size": 1}
    sc = write_yaml({**QUAD, "round": rnd, "algorithm": algo, "system": {"trace": "off.csv"}})
    _exit2(capsys, ["validate", str(sc)], "system.trace", "never" if False else "no client is ever online")
    _exit2(capsys, ["run", str(sc), "--out", str(tmp_path / "r"), "--quiet"], "no client is ever online")


def test_compute_fitting_too_many_steps_is_refused_before_the_folder_is_touched(write_yaml, tmp_path, capsys):
    sc = write_yaml({**LOGREG, "round": {"policy": "window", "window": 5.0}, "system": {"compute": {"flops": 1e300}}})
    _exit2(capsys, ["run", str(sc), "--out", str(tmp_path / "r"), "--quiet"], "system.compute.flops", "10,000,000",
           seconds=60)
    assert not (tmp_path / "r").exists()
    # validate counts the model's FLOPs for this one check and refuses it too (issue 21.18)
    _exit2(capsys, ["validate", str(sc)], "system.compute.flops", "10,000,000", seconds=60)
    # capped by round.max_local_steps, both accept it
    capped = write_yaml({**LOGREG, "round": {"policy": "window", "window": 5.0, "max_local_steps": 5},
                         "system": {"compute": {"flops": 1e300}}}, name="capped.yaml")
    from fedsim.cli import main

    assert main(["validate", str(capped)]) == 0


def test_async_concurrency_above_the_clients_ever_online_is_refused(write_yaml, tmp_path, capsys):
    # four clients, client 1 never online: three are ever online
    (tmp_path / "t.csv").write_text("client,start,end,online,speed\n0,0,10,1,1\n1,0,10,0,1\n2,0,10,1,1\n3,0,10,1,1\n")
    quad4 = {**QUAD, "data": {"name": "quadratic", "centers": [[1.0], [2.0], [3.0], [4.0]]}}
    algo = {"name": "fedasync", "lr": 0.1, "batch_size": 1}
    sc = write_yaml({**quad4, "round": {"policy": "async", "local_steps": 2, "concurrency": 4}, "algorithm": algo,
                     "system": {"trace": "t.csv"}})
    _exit2(capsys, ["validate", str(sc)], "round.concurrency: 4 is more than the 3 clients ever online")
    _exit2(capsys, ["run", str(sc), "--out", str(tmp_path / "r"), "--quiet"], "round.concurrency: 4")
    assert not (tmp_path / "r").exists()
    ok = write_yaml({**quad4, "round": {"policy": "async", "local_steps": 2, "concurrency": 3}, "algorithm": algo,
                     "system": {"trace": "t.csv"}}, name="ok.yaml")
    assert main(["validate", str(ok)]) == 0


def test_concurrency_counts_the_clients_that_replay_an_online_device():
    from types import SimpleNamespace as NS

    import numpy as np

    from fedsim.errors import ScenarioError
    from fedsim.validate import check_trace

    trace = NS(path="t.csv", clients=[NS(online=np.array([1])), NS(online=np.array([0])), NS(online=np.array([0, 1]))])

    def sc(concurrency):
        return NS(round=NS(policy="async", concurrency=concurrency, local_time=None), data=NS(num_clients=7))

    check_trace(sc(5), trace)  # 7 clients replay devices 0, 1, 2, 0, 1, 2, 0: five of them ever online
    with pytest.raises(ScenarioError, match="round.concurrency: 6 is more than the 5 clients ever online"):
        check_trace(sc(6), trace)
