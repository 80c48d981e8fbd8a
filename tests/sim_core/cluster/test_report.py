"""The CLI and the Python API accept deployments; the summary names the instances."""

from __future__ import annotations

import json

import pandas as pd

from sim_core.cli import main


def test_cli_runs_a_deployment_from_set_and_writes_per_instance_rows(tmp_path, capsys):
    rc = main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=40", "--set", "deployment.replicas=2",
               "--set", "deployment.router=least_kv", "--out", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and "2 replicas of H100 SXM (2 GPUs), router least_kv" in out
    assert "replica 0 (H100 SXM)" in out and "replica 1 (H100 SXM)" in out
    inst = pd.read_csv(tmp_path / "instances.csv")
    assert inst["requests"].sum() == 40
    req = pd.read_csv(tmp_path / "requests.csv")
    assert set(req["instance"]) == {"replica 0", "replica 1"}
    assert json.loads((tmp_path / "config.json").read_text())["deployment"]["replicas"] == 2


def test_cli_disaggregated_preset_reports_kv_transfers(capsys):
    assert main(["run", "cluster-dynamo-llama70b-fp8-8xh100-3p1d", "--set", "workload.num_requests=30"]) == 0
    out = capsys.readouterr().out
    assert "3 prefill of 2x H100 SXM + 1 decode of 2x H100 SXM (8 GPUs)" in out and "KV transfers  30 requests" in out


def test_cli_rejects_bad_deployment_values_with_the_field(capsys):
    assert main(["run", "chat-h100-llama8b", "--set", "deployment.replicas=0"]) == 2
    assert "deployment.replicas = 0" in capsys.readouterr().err
    assert main(["run", "chat-h100-llama8b", "--set", "deployment.rooter=x"]) == 2
    assert "unknown field 'rooter'" in capsys.readouterr().err


def test_the_tables_of_a_deployment_run_join_on_the_instance_column(tmp_path):
    # ticks.csv and instances.csv named instances 'replica 0 (H100 SXM)', requests.csv 'replica 0': a join of a run's
    # own tables on `instance` matched nothing
    for preset, out in (("cluster-router-4xh100-llama8b", tmp_path / "r"), ("cluster-distserve-opt13b-3xa100-p2d1", tmp_path / "d")):
        assert main(["run", preset, "--set", "workload.num_requests=20", "--out", str(out)]) == 0
        inst = pd.read_csv(out / "instances.csv")
        ticks, req = pd.read_csv(out / "ticks.csv"), pd.read_csv(out / "requests.csv")
        names = set(inst["instance"])
        assert set(ticks["instance"]) == names
        assert {part for label in req["instance"] for part in label.split(" -> ")} <= names
        per_instance = ticks.groupby("instance").size()
        assert all(per_instance[name] >= n for name, n in zip(inst["instance"], inst["ticks"]))  # busy ticks + idle rows
        assert inst["gpus"].str.contains("A100|H100").all()


def test_one_replica_and_one_gpu_are_singular(capsys):
    # Review 26: "1 replicas of H100 SXM (1 GPUs)"
    from sim_core.cluster.report import counted, describe_deployment
    from tests.conftest import make_config

    assert counted(1, "GPU") == "1 GPU" and counted(2, "GPU") == "2 GPUs" and counted(1200, "replica") == "1,200 replicas"
    cfg = make_config(deployment={"replicas": 1})
    assert describe_deployment(cfg).startswith("1 replica of H100 SXM (1 GPU), router")
    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=10", "--set", "deployment.replicas=1"]) == 0
    assert "on 1 replica of H100 SXM (1 GPU)," in capsys.readouterr().out


def test_prefix_affinity_without_prefix_caching_says_it_routes_as_least_outstanding(capsys):
    # Review 26: prefix_affinity with kv_cache.enable_prefix_caching off never sees a cached prefix, so it routes every
    # request to the least outstanding replica; nothing said so.
    from sim_core.cluster.report import routing_notes
    from tests.conftest import make_config

    args = ["run", "chat-h100-llama8b", "--set", "workload.num_requests=10", "--set", "deployment.replicas=2",
            "--set", "deployment.router=prefix_affinity"]  # fmt: skip
    assert main(args) == 0
    note = next(line for line in capsys.readouterr().out.splitlines() if "prefix_affinity" in line and "NOTE" in line)
    assert "kv_cache.enable_prefix_caching" in note and "least outstanding" in note
    assert main([*args, "--set", "kv_cache.enable_prefix_caching=true"]) == 0
    assert "NOTE: router prefix_affinity" not in capsys.readouterr().out
    on = make_config(deployment={"replicas": 2, "router": "prefix_affinity"}, kv_cache__enable_prefix_caching=True)
    assert routing_notes(on) == []
    assert routing_notes(make_config(deployment={"replicas": 2, "router": "least_outstanding"})) == []
    assert routing_notes(make_config(deployment={"replicas": 1, "router": "prefix_affinity"})) == []  # nothing to choose
    assert "as with router least_outstanding" in routing_notes(make_config(deployment={"replicas": 2, "router": "prefix_affinity"}))[0]
    xpyd = make_config(deployment={"router": "prefix_affinity", "disaggregation": {"prefill": {"replicas": 2}}})
    assert routing_notes(xpyd) and "prefill" in routing_notes(xpyd)[0]


def test_cli_summary_names_the_instance_whose_kv_peak_it_reports(capsys):
    # The deployment's KV peak is its fullest instance's share of that instance's own pool: round robin over two
    # replicas with agent pairs fills replica 0 (38 %) and leaves replica 1 near empty, so 'peak 38 %' after
    # '910,304 tokens' (the deployment's total) read as 346k tokens in use that never were. One engine: unchanged.
    from sim_core.cluster import run_deployment
    from sim_core.presets import load_preset

    cfg = load_preset("cluster-router-2xh100-agent-pairs")
    res = run_deployment(cfg)
    full = res.kv_peak_instance
    assert full.result.summary.kv_peak_usage == res.summary.kv_peak_usage
    assert all(x.result.summary.kv_peak_usage <= res.summary.kv_peak_usage for x in res.instances)
    assert full.result.memory.kv_capacity_tokens < res.summary.kv_capacity_tokens  # (its own pool: half of the total)
    assert main(["run", "cluster-router-2xh100-agent-pairs"]) == 0
    out = capsys.readouterr().out
    assert (f"peak {res.summary.kv_peak_usage:.0%} ({full.name}, of its {full.result.memory.kv_capacity_tokens:,} tokens), "
            in out)  # fmt: skip
    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=20"]) == 0
    assert "tokens), peak 4%, 0 pre-emptions" in capsys.readouterr().out


def test_cli_counts_transfers_that_waited_for_the_link_and_rejects_a_bad_contention(tmp_path, capsys):
    # a slow link at a high rate: transfers queue for the decode instance's side of the link (link.contention = fifo)
    args = ["run", "cluster-splitwise-llama70b-4xdgx-ha-3p1d", "--set", "workload.num_requests=120",
            "--set", "deployment.disaggregation.link.bandwidth_gb_per_s=10"]  # fmt: skip
    assert main(args + ["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("KV transfers"))
    waited = int(line.split("waited for the link ")[1].split(",")[0].replace(",", ""))
    req = pd.read_csv(tmp_path / "requests.csv")
    assert waited == int((req["kv_link_wait_s"] > 0).sum()) > 0
    assert main(args + ["--set", "deployment.disaggregation.link.contention=none"]) == 0
    out = capsys.readouterr().out
    assert "no contention" in out and "waited for the link 0," in out
    assert main(args + ["--set", "deployment.disaggregation.link.contention=fair"]) == 2
    err = capsys.readouterr().err
    assert "deployment.disaggregation.link.contention = 'fair'" in err and "'fifo'" in err and "Traceback" not in err


def test_a_deployments_prefill_share_is_of_its_busy_gpu_seconds_as_its_gpu_busy():
    # DistServe's P TP2 + D TP1: "GPU busy 45 %" weighs each instance by its GPUs, and the prefill share beside it
    # weighed them by busy time (15 %) where 25 % of the busy GPU-seconds prefilled
    import pytest

    from sim_core import load_preset, run_simulation
    from sim_core.types import Phase

    res = run_simulation(load_preset("cluster-distserve-opt13b-3xa100-p2d1"))
    busy = [float(x.result.timeline.duration_s[x.result.timeline.phase != Phase.IDLE].sum()) * x.num_gpus for x in res.instances]
    prefill = [float(x.result.timeline.duration_s[x.result.timeline.num_prefill_tokens > 0].sum()) * x.num_gpus
               for x in res.instances]  # fmt: skip
    s = res.summary
    assert s.gpu_busy_fraction == pytest.approx(sum(busy) / (res.config.num_gpus_total * s.makespan_s), abs=1e-12)
    assert s.prefill_time_fraction == pytest.approx(sum(prefill) / sum(busy), abs=1e-12)
    merged = res.timeline  # (by busy time, GPUs unweighted: what the headline read before)
    by_time = float(merged.duration_s[merged.num_prefill_tokens > 0].sum() / merged.duration_s[merged.phase != Phase.IDLE].sum())
    assert s.prefill_time_fraction > by_time + 0.05
