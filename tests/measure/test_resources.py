"""measure/resources.py: a real step is refused before it allocates when its predicted peak exceeds what is free."""

import pytest

from trainledger.errors import TrainledgerError
from trainledger.measure import resources
from trainledger.measure.compare import measure_model
from trainledger.specs import get_model


def test_available_cpu_memory_is_a_positive_figure_with_a_source():
    have, source = resources.available_cpu_bytes()
    assert have > 0 and source


def test_check_fits_names_both_numbers_and_the_way_out():
    resources.check_fits(1e9, "cpu", available=(2e9, "test"))
    resources.check_fits(1e15, "fake")                       # fake and meta allocate nothing: never refused
    with pytest.raises(TrainledgerError) as error:
        resources.check_fits(3e9, "cpu", available=(2e9, "test"))
    message = str(error.value)
    assert "--device fake" in message and "2.79 GiB" in message and "1.86 GiB" in message and "\n" not in message


def test_measure_model_checks_before_building(monkeypatch):
    """With (pretend) 1 MiB free, even the tiny model is refused, and no model is ever built."""
    monkeypatch.setattr(resources, "available_cpu_bytes", lambda: (2.0**20, "pretend"))
    import trainledger.models as models
    monkeypatch.setattr(models, "build_model", lambda *a, **k: pytest.fail("allocated before the check"))
    with pytest.raises(TrainledgerError, match="--device fake"):
        measure_model(get_model("tiny"), 1, 32, device="cpu")


def test_a_step_that_fits_runs(one_torch_thread):
    result = measure_model(get_model("tiny"), 1, 32, precision="fp32", device="cpu")
    assert result["relative_error"]["n_params"] == 0
