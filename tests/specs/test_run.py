"""A training run as one value (specs/run.py, run_table.py, run_checks.py, run_file.py): what a run refuses to be,
how it is resolved for a model and hardware, and its file read back as it was written."""

import json

import pytest

from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu
from trainledger.specs.run import Batch, Experts, Fsdp, Hardware, Kernels, Layout, Levers, Numerics, Run
from trainledger.specs.run_checks import ParameterCount, resolve
from trainledger.specs.run_file import document, dumps, read_document
from trainledger.specs.run_table import by_flag, for_command, locate, run_from_dict, run_to_dict, settings

# (what is built, the flag the one-line error must name): each group refuses out-of-range values by itself
BAD = [
    (lambda: Batch(batch_size=0), "--batch-size"),
    (lambda: Batch(global_batch_size=-4), "--global-batch-size"),
    (lambda: Batch(seq_len=True), "--seq-len"),
    (lambda: Numerics(precision="fp9"), "--precision"),
    (lambda: Numerics(optimizer="lion"), "--optimizer"),
    (lambda: Layout(tp=0), "--tp"),
    (lambda: Layout(zero=4), "--zero"),
    (lambda: Layout(sp="yes"), "--sp"),
    (lambda: Layout(schedule="gpipe"), "--schedule"),
    (lambda: Fsdp(param_dtype="int8"), "--fsdp-param-dtype"),
    (lambda: Fsdp(replicate=0), "--dp-replicate"),
    (lambda: Experts(imbalance=0.5), "--expert-imbalance"),
    (lambda: Experts(overlap=1.5), "--ep-overlap"),
    (lambda: Experts(capacity_factor=0.0), "--capacity-factor"),
    (lambda: Experts(dispatcher="nccl"), "--ep-dispatcher"),
    (lambda: Levers(recompute="some"), "--recompute"),
    (lambda: Levers(reserve=-1.0), "--reserve"),
    (lambda: Kernels(framework="jax"), "--framework"),
    (lambda: Kernels(compile=True, framework="megatron"), "--compile"),
    (lambda: Kernels(loss_upcast=False, framework="megatron"), "--no-loss-upcast"),
    (lambda: Hardware(get_gpu("h100"), num_gpus=0), "--num-gpus"),
]


@pytest.mark.parametrize("build, flag", BAD, ids=[flag for _, flag in BAD])
def test_a_group_out_of_range_cannot_be_built(build, flag):
    with pytest.raises(TrainledgerError) as error:
        build()
    message = str(error.value)
    assert flag in message and "\n" not in message


def test_every_setting_has_a_unique_flag_and_known_commands():
    table = settings()
    flags = [s.flag for s in table]
    assert len(flags) == len(set(flags)) and all(flag.startswith("--") for flag in flags)
    assert {"--tp", "--batch-size", "--recompute", "--framework", "--dp-replicate", "--ep-dispatcher"} <= set(flags)
    for s in table:
        assert s.help and s.commands <= {"step", "memory", "layout", "plan", "fit", "profile", "train"}, s.flag
    # step takes every setting: it is asked about a whole run
    assert {s.flag for s in for_command("step")} == {s.flag for s in table if "step" in s.commands}
    assert by_flag()["--tp"].path == "layout.tp" and by_flag()["--dp-replicate"].path == "layout.fsdp.replicate"


def test_with_changes_fields_by_name_in_their_groups():
    run = Run().with_(tp=8, recompute="full", replicate=2, dispatcher="deepep", seq_len=4096)
    assert (run.layout.tp, run.levers.recompute, run.layout.fsdp.replicate) == (8, "full", 2)
    assert (run.layout.experts.dispatcher, run.batch.seq_len) == ("deepep", 4096)
    assert Run().layout.tp == 1                      # frozen values: the original is unchanged
    assert locate("replicate") == "layout.fsdp" and locate("layout.tp") == "layout"
    with pytest.raises(TrainledgerError, match="no field of a run is called 'tq'"):
        Run().with_(tq=2)


def test_resolve_fills_every_default_from_the_model_and_hardware():
    spec, gpu = get_model("llama-2-7b"), get_gpu("h100")
    resolved = resolve(spec, Hardware(gpu, 16), Run().with_(tp=2))
    run = resolved.run
    assert resolved.hardware.num_gpus == 16 and run.layout.dp == 8 and resolved.micro_batches == 1
    assert run.batch.seq_len == spec.default_seq_len == 4096 and run.batch.global_batch_size == 8
    assert run.numerics.precision == "amp-bf16" and run.layout.zero == 3 and run.layout.etp == 2
    assert run.kernels.mtp is False and run.kernels.pp_overlap is False
    assert resolve(spec, resolved.hardware, run) == resolved          # idempotent
    cpu = type(gpu)(name="cpu-like", peak_flops_per_s={"fp32": 1e12}, memory_bytes=1e10,
                    memory_bandwidth_bytes_per_s=1e10)
    assert resolve(spec, Hardware(cpu), Run()).run.numerics.precision == "fp32"   # no bf16 peak: fp32


@pytest.mark.parametrize("changes, num_gpus, flag", [
    (dict(tp=3), None, "--tp"),                        # 32 heads
    (dict(pp=64), None, "--pp"),                       # 32 layers
    (dict(dp=3), 8, "--dp"),                           # 8 GPUs
    (dict(tp=3), 8, "--tp"),                           # the heads are the cause, not the 8 GPUs (issue 41)
    (dict(tp=2, pp=3), 8, "--num-gpus"),
    (dict(ep=2, dp=2), None, "--ep"),                  # a dense model
    (dict(cp=3, seq_len=4096), None, "--cp"),
    (dict(pp=2, interleave=3), 8, "--interleave"),
    (dict(replicate=2, zero=1), 8, "--dp-replicate"),
    (dict(pp=3, schedule="dualpipe"), None, "--schedule"),
    (dict(global_batch_size=12), 8, "--global-batch-size"),
])
def test_a_run_the_model_cannot_take_is_refused_naming_the_flag(changes, num_gpus, flag):
    with pytest.raises(TrainledgerError) as error:
        resolve(get_model("llama-2-7b"), Hardware(get_gpu("h100"), num_gpus), Run().with_(**changes))
    assert flag in str(error.value)


def test_a_parameter_count_is_a_model_for_memory():
    resolved = resolve(ParameterCount(7e9), Hardware(None), Run().with_(dp=8))
    assert resolved.run.layout.dp == 8 and resolved.run.batch.seq_len is None
    with pytest.raises(TrainledgerError, match="--params"):
        ParameterCount(0)


def test_the_run_as_data_reads_back_exactly():
    run = Run().with_(tp=4, sp=True, pp=2, interleave=2, zero=1, recompute="selective", capacity_factor=1.25,
                      reserve="expandable", framework="megatron", pp_overlap=True)
    assert run_from_dict(run_to_dict(run)) == run
    assert run_from_dict(json.loads(json.dumps(run_to_dict(run)))) == run
    assert run_from_dict({"layout": {"tp": 2}}) == Run().with_(tp=2)       # a group may give a few keys


@pytest.mark.parametrize("data, words", [
    ({"layout": {"tq": 2}}, "unknown key 'layout.tq'"),
    ({"layouts": {}}, "unknown key 'layouts'"),
    ({"layout": {"tp": "2"}}, "layout.tp (--tp) has the wrong type"),
    ({"layout": {"tp": 0}}, "--tp must be a positive integer"),
    ({"kernels": {"flash": "yes"}}, "kernels.flash (--flash) has the wrong type"),
    ({"layout": {"fsdp": {"replicate": 1.5}}}, "layout.fsdp.replicate (--dp-replicate) has the wrong type"),
    ({"levers": {"reserve": "lots"}}, "levers.reserve (--reserve) must be"),
])
def test_a_bad_key_is_one_line_naming_it(data, words):
    with pytest.raises(TrainledgerError) as error:
        run_from_dict(data, "run file f.toml")
    assert words in str(error.value) and str(error.value).startswith("run file f.toml")


def test_the_run_file_round_trips_through_toml_and_json(tmp_path):
    import tomllib
    run = resolve(get_model("gpt2"), Hardware(get_gpu("h100"), 8), Run().with_(zero=1, capacity_factor=None)).run
    doc = document({"name": "gpt2"}, {"gpu": "h100-sxm", "num_gpus": 8}, run, {"train": {"steps": 10}})
    text = dumps(doc, "run.toml")
    assert "# --tp: tensor-parallel size" in text.replace("    # ", "# ")       # the file documents itself
    assert "# capacity_factor = (unset" in text                                    # an unset setting is a comment
    back = read_document(tomllib.loads(text), "run.toml")
    assert back.run == run and back.model == {"name": "gpt2"} and back.sections == {"train": {"steps": 10}}
    assert back.hardware == {"gpu": "h100-sxm", "num_gpus": 8}
    assert read_document(json.loads(dumps(doc, "run.json")), "run.json").run == run


@pytest.mark.parametrize("change, words", [
    ({"version": 2}, "has version 2"),
    ({"version": None}, "has no version"),
    ({"model": {"nmae": "gpt2"}}, "unknown key 'model.nmae'"),
    ({"hardware": {"num_gpus": "8"}}, "hardware.num_gpus (--num-gpus) has the wrong type"),
    ({"extra": {}}, "unknown key 'extra'"),
])
def test_a_run_file_of_another_version_or_with_a_stray_key_is_refused(change, words):
    doc = document({"name": "gpt2"}, {"gpu": "h100-sxm"}, Run())
    doc.update(change)
    doc = {k: v for k, v in doc.items() if v is not None}
    with pytest.raises(TrainledgerError, match=words.replace("(", r"\(").replace(")", r"\)")):
        read_document(doc, "f.toml")
