"""The compiled pipeline: task graph, gate condition, GPU request, secrets, image tags, parameters."""

import pytest
import yaml

import recpipe
from components import CUDA_IMAGE, IMAGE
from pipelines.submit import check_arguments, run_url
from pipelines.training_pipeline import compile_pipeline


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    path = compile_pipeline(tmp_path_factory.mktemp("compiled") / "pipeline.yaml")
    ir, platform = list(yaml.safe_load_all(path.read_text()))
    return ir, platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


def _tasks(ir, component="root"):
    dag = ir["root"]["dag"] if component == "root" else ir["components"][component]["dag"]
    return dag["tasks"]


def _walk(ir, component="root", out=None):  # noqa: C901
    """Every task in the pipeline with the chain of conditions above it."""
    out = {} if out is None else out
    for name, task in _tasks(ir, component).items():
        ref = task["componentRef"]["name"]
        cond = task.get("triggerPolicy", {}).get("condition")
        if ref.startswith("comp-condition"):
            _walk(ir, ref, out)
            for sub in out.values():
                if sub["parent"] == ref and cond:
                    sub["conditions"].append(cond)
            for k, v in list(out.items()):
                if v["parent"] == ref:
                    out[k] = {**v, "parent": component}
        else:
            out[name] = {
                "component": ref,
                "deps": task.get("dependentTasks", []),
                "parent": component,
                "conditions": [],
                "task": task,
            }
    return out


def test_task_graph_and_gate(compiled):
    ir, _ = compiled
    tasks = _walk(ir)
    assert set(tasks) == {
        "start",
        "ingest",
        "fit",
        "train",
        "evaluate",
        "export",
        "register",
        "promote",
        "reject",
        "finish",
    }
    root = _tasks(ir)
    assert root["ingest"]["dependentTasks"] == ["start"]
    assert set(root["fit"]["dependentTasks"]) == {"ingest", "start"}
    assert set(root["train"]["dependentTasks"]) == {"fit", "ingest", "start"}
    assert set(root["evaluate"]["dependentTasks"]) == {"ingest", "start", "train"}
    cond = {k: " & ".join(v["conditions"]) for k, v in tasks.items()}
    gate = "inputs.parameter_values['pipelinechannel--evaluate-gate_passed'] == true"
    assert gate in cond["export"] and gate in cond["register"] and gate in cond["promote"]
    assert "pipelinechannel--auto_promote'] == true" in cond["promote"]
    assert cond["reject"] == f"!({gate})"
    assert cond["start"] == cond["train"] == cond["evaluate"] == cond["finish"] == ""
    # export and evaluate read train's checkpoint; register reads evaluate's report.
    assert root["evaluate"]["inputs"]["artifacts"]["checkpoint"]["taskOutputArtifact"] == {
        "outputArtifactKey": "checkpoint",
        "producerTask": "train",
    }
    register_inputs = tasks["register"]["task"]["inputs"]["artifacts"]
    assert register_inputs["report"]["componentInputArtifact"] == "pipelinechannel--evaluate-report"
    # The pipeline's output is finish's outcome, fed by register or reject.
    assert (
        ir["root"]["dag"]["outputs"]["parameters"]["Output"]["valueFromParameter"]["producerSubtask"]
        == "finish"
    )
    assert set(root["finish"]["dependentTasks"]) == {"condition-branches-1", "start"}


def test_gpu_request_and_placement(compiled):
    ir, executors = compiled
    resources = ir["deploymentSpec"]["executors"]["exec-train"]["container"]["resources"]
    # start turns the parameters into the train pod's own request: gpus_per_worker for one pod, 0 when
    # the pod only launches a PyTorchJob (whose pods then ask for the GPUs).
    assert resources["accelerator"] == {
        "resourceCount": "{{$.inputs.parameters['pipelinechannel--start-pod_gpus']}}",
        "resourceType": "{{$.inputs.parameters['pipelinechannel--accelerator_type']}}",
    }
    train = _tasks(ir)["train"]["inputs"]["parameters"]
    assert train["pipelinechannel--start-pod_gpus"]["taskOutputParameter"] == {
        "outputParameterKey": "pod_gpus",
        "producerTask": "start",
    }
    assert train["pipelinechannel--accelerator_type"]["componentInputParameter"] == "accelerator_type"
    for name in ("workers", "gpus_per_worker", "node_selector", "tolerations", "workspace_pvc"):
        assert train[name]["componentInputParameter"] == name
    k8s = executors["exec-train"]
    assert k8s["nodeSelector"]["nodeSelectorJson"]["taskOutputParameter"] == {
        "outputParameterKey": "pod_node_selector",
        "producerTask": "start",
    }
    assert k8s["tolerations"][0]["tolerationJson"]["taskOutputParameter"] == {
        "outputParameterKey": "pod_tolerations",
        "producerTask": "start",
    }
    (pvc,) = k8s["pvcMount"]
    assert pvc["mountPath"] == "/workspace" and pvc["componentInputParameter"] == "workspace_pvc"
    start = _tasks(ir)["start"]["inputs"]["parameters"]
    assert start["node_selector"]["componentInputParameter"] == "node_selector"
    assert start["kfp_run_id"]["runtimeValue"]["constant"] == "{{$.pipeline_job_uuid}}"


def test_start_receives_the_scheduled_time_and_the_daily_parameters(compiled, tmp_path):
    """KFP fills the schedule-time placeholder only where a task input is exactly that constant."""
    ir, _ = compiled
    start = _tasks(ir)["start"]["inputs"]["parameters"]
    assert start["schedule_time"] == {"runtimeValue": {"constant": "{{$.pipeline_job_schedule_time_utc}}"}}
    assert start["partitions"]["componentInputParameter"] == "partitions"
    assert start["init_from"]["componentInputParameter"] == "init_from"
    # kfp.local (2.17) cannot parse that placeholder: recpipe run's variant sends none (no scheduled time).
    from kfp import compiler

    from pipelines.training_pipeline import local_training_pipeline

    compiler.Compiler().compile(local_training_pipeline, str(tmp_path / "local.yaml"))
    local_ir = next(yaml.safe_load_all((tmp_path / "local.yaml").read_text()))
    assert _tasks(local_ir)["start"]["inputs"]["parameters"]["schedule_time"] == {
        "runtimeValue": {"constant": ""}
    }
    assert "pipeline_job_schedule_time_utc" not in (tmp_path / "local.yaml").read_text()
    inputs = ir["components"]["comp-start"]["inputDefinitions"]["parameters"]
    assert {
        k: inputs[k]["parameterType"] for k in ("partitions", "init_from", "schedule_time")
    } == dict.fromkeys(("partitions", "init_from", "schedule_time"), "STRING")


def test_secrets_pull_policy_and_images(compiled):
    ir, executors = compiled
    images = {k: v["container"]["image"] for k, v in ir["deploymentSpec"]["executors"].items()}
    assert IMAGE == f"ghcr.io/recpipe/recpipe:{recpipe.__version__}" and CUDA_IMAGE.endswith(
        f":{recpipe.__version__}"
    )
    assert set(images.values()) == {IMAGE, CUDA_IMAGE}
    assert not any(i.endswith(":latest") for i in images.values())
    assert images["exec-train"] == CUDA_IMAGE and images["exec-evaluate"] == IMAGE
    for name in images:
        ex = executors[name]
        assert ex["imagePullPolicy"] == "IfNotPresent"
        secrets = {s["secretName"]: {k["envVar"] for k in s["keyToEnv"]} for s in ex["secretAsEnv"]}
        assert secrets["recpipe-mlflow"] == {"MLFLOW_TRACKING_TOKEN"}
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= secrets["recpipe-object-store"]
    for name in ("exec-start", "exec-ingest"):
        secrets = {
            s["secretName"]: {k["envVar"] for k in s["keyToEnv"]} for s in executors[name]["secretAsEnv"]
        }
        assert secrets["recpipe-odps"] == {"ODPS_ACCESS_ID", "ODPS_ACCESS_KEY", "ODPS_ENDPOINT"}
    # No credential is a pipeline parameter, no component installs packages at run time.
    params = ir["root"]["inputDefinitions"]["parameters"]
    assert not [p for p in params if any(w in p.lower() for w in ("key", "token", "password", "secret"))]
    for ex in ir["deploymentSpec"]["executors"].values():
        assert "pip install" not in " ".join(ex["container"].get("command", []))


def test_parameters_and_defaults(compiled):
    ir, _ = compiled
    params = ir["root"]["inputDefinitions"]["parameters"]
    expected = {
        "config": "STRING", "data_source": "STRING", "workers": "NUMBER_INTEGER", "gpus_per_worker": "NUMBER_INTEGER",
        "accelerator_type": "STRING", "node_selector": "STRUCT", "tolerations": "LIST", "min_auc": "STRING",
        "max_auc_drop": "STRING", "max_logloss_rise": "STRING", "backends": "STRING", "mlflow_uri": "STRING",
        "model_name": "STRING", "auto_promote": "BOOLEAN", "workspace_pvc": "STRING", "config_overrides": "STRUCT",
        "launcher": "STRING", "partitions": "STRING", "init_from": "STRING",
    }  # fmt: skip
    # Gate thresholds default to "use the config's eval.gate"; cluster runs launch PyTorchJobs.
    assert [params[k]["defaultValue"] for k in ("min_auc", "max_auc_drop", "max_logloss_rise")] == [
        "",
        "",
        "",
    ]
    assert params["launcher"]["defaultValue"] == "pytorchjob"
    # Empty: the config's data.partitions and train.init_from.
    assert params["partitions"]["defaultValue"] == params["init_from"]["defaultValue"] == ""
    assert {k: v["parameterType"] for k, v in params.items()} == expected
    assert params["auto_promote"]["defaultValue"] is True and params["workers"]["defaultValue"] == 1
    check_arguments({"workers": 4, "tolerations": []})
    with pytest.raises(ValueError, match="unknown pipeline parameter"):
        check_arguments({"worker": 4})
    assert run_url("http://kfp:8080/", "abc") == "http://kfp:8080/#/runs/details/abc"


def test_submit_sends_the_compiled_package_with_the_token_from_env(monkeypatch, capsys):
    import kfp

    from recpipe.cli.main import main

    calls = {}

    class Client:
        def __init__(self, host, existing_token=None, namespace="kubeflow"):
            calls["client"] = (host, existing_token, namespace)

        def create_run_from_pipeline_package(
            self, path, arguments, run_name, experiment_name, namespace, enable_caching
        ):
            ir = next(yaml.safe_load_all(open(path)))
            calls["run"] = (ir["pipelineInfo"]["name"], arguments, experiment_name, enable_caching)
            return type("Result", (), {"run_id": "run-123"})()

    monkeypatch.setattr(kfp, "Client", Client)
    monkeypatch.setenv("KFP_TOKEN", "t0ken")
    argv = ["pipeline", "submit", "--host", "http://kfp.example:8080", "--experiment", "nightly"]
    argv += ["--param", "workers=4", "--param", "node_selector={gpu: h200}", "--param", "backends=jit,rtp"]
    assert main(argv) == 0
    assert calls["client"] == ("http://kfp.example:8080", "t0ken", "kubeflow")
    assert calls["run"] == (
        "recpipe-training",
        {"workers": 4, "node_selector": {"gpu": "h200"}, "backends": "jit,rtp"},
        "nightly",
        False,
    )
    assert capsys.readouterr().out.splitlines()[-1] == "http://kfp.example:8080/#/runs/details/run-123"
    assert main(["pipeline", "submit", "--host", "http://x", "--param", "gpus=8"]) == 2  # unknown parameter


def test_compile_command(tmp_path):
    from recpipe.cli.main import main

    assert main(["pipeline", "compile", "--out", str(tmp_path / "p.yaml")]) == 0
    ir = next(yaml.safe_load_all((tmp_path / "p.yaml").read_text()))
    assert ir["pipelineInfo"]["name"] == "recpipe-training"
