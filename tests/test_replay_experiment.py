"""``kind: replay``: recorded basis scans replayed by the job runner, the config layer and the workflow."""

import warnings

import numpy as np
import pytest
import yaml

from adaptcs.bases.images import make_basis
from adaptcs.config import load_config, resolve_experiment
from adaptcs.data.synthetic import problem_rng
from adaptcs.design.basis_scan import photon_basis_scan, replay_basis_scan
from adaptcs.experiments import get_experiment, run_job
from adaptcs.experiments.scan import ReplayExperiment
from adaptcs.models.wavelet_tree import WaveletTreeSpikeSlab


def disc(side: int) -> np.ndarray:
    r, c = np.mgrid[:side, :side]
    return (0.2 + 0.6 * ((r - 0.4 * side) ** 2 + (c - 0.6 * side) ** 2 < (0.25 * side) ** 2)).ravel()


@pytest.fixture
def scans(tmp_path):
    """A photon-noise Haar scan of a 16 x 16 disc, and the same scan in other units (a gain and an offset)."""
    basis = make_basis("haar", 16)
    folder = tmp_path / "scans"
    folder.mkdir()
    values = photon_basis_scan(basis, disc(16), 1e4, np.random.default_rng(0))
    np.savetxt(folder / "scan0.csv", values)
    np.savetxt(folder / "scan1.csv", 250.0 * values + basis.analyze(np.full(basis.d, 3.0)))  # 250 x + 3
    return folder


def options(folder, **extra):
    return {"kind": "replay", "scans": str(folder), "side": 16, **extra}


def test_a_replay_job_is_the_scan_replayed_in_image_units(scans):
    """The runner's replay is :func:`replay_basis_scan` on the scan rescaled so that the full-scan image spans
    [0, 1]; an instrument's gain and offset do not change the errors."""
    spec = get_experiment("disc", options(scans))
    assert spec.scans == (str(scans / "scan0.csv"), str(scans / "scan1.csv"))
    assert spec.checkpoint_counts() == (25, 38, 64) and spec.n_initial == 16 and spec.batch_size(0) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = run_job("disc", 0, "wavelet_tree", "design", [0, 1], data_options=options(scans),
                      hyperparameters="learned")
    basis = make_basis("haar", 16)
    raw = np.loadtxt(scans / "scan0.csv")
    full = basis.synthesize(raw)
    low, span = full.min(), full.max() - full.min()
    np.testing.assert_allclose(job.w_true[0], (full - low) / span, atol=1e-12)
    assert job.w_true.min() == pytest.approx(0.0) and job.w_true.max() == pytest.approx(1.0)
    np.testing.assert_array_equal(job.n_measurements, [25, 38, 64])
    # the job is the library's replay of the rescaled values with the job's random order (which breaks the design's
    # ties); the second scan, the first with a gain and an offset, rescales to the same values
    rescaled = [spec.scan_values(replicate) for replicate in (0, 1)]
    np.testing.assert_allclose(rescaled[1], rescaled[0], rtol=1e-9, atol=1e-12)
    for replicate in (0, 1):
        direct = replay_basis_scan(WaveletTreeSpikeSlab(basis, learn=WaveletTreeSpikeSlab.LEARNABLE), basis,
                                   rescaled[replicate], "design", [25 / 256, 38 / 256, 64 / 256], batch_size=1,
                                   rng=problem_rng(spec.key, 0, replicate, 1))
        np.testing.assert_allclose(job.checkpoint_coef[replicate], basis.synthesize(direct.coef), rtol=1e-9, atol=1e-12)
    assert np.all(np.diff(job.errors[0]) < 0) and job.errors[0, -1] < 0.45
    assert job.checkpoint_coef.shape == (2, 3, 256) and np.all(job.converged >= 0)


def test_every_order_measures_the_approximation_then_only_what_was_recorded(scans, tmp_path):
    values = np.loadtxt(scans / "scan0.csv")
    values[100:] = np.nan  # only the first 100 basis images shown
    np.savetxt(tmp_path / "partial.csv", values)
    spec = get_experiment("part", options(tmp_path / "partial.csv", fractions=[0.2, 0.39]))
    assert spec.strategies == ("design", "topdown", "predict", "random")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for strategy in spec.strategies:
            job = run_job("part", 0, "gss_ep_scales", strategy, [0], hyperparameters="learned",
                          data_options=options(tmp_path / "partial.csv", fractions=[0.2, 0.39]))
            assert np.all(np.isfinite(job.errors)) and job.n_measurements.tolist() == [51, 99]
    with pytest.raises(ValueError, match="100 of 256 basis images were measured; the fraction 0.5 needs 128"):
        get_experiment("part", options(tmp_path / "partial.csv", fractions=[0.5])).case(0, 0)


@pytest.mark.parametrize(("data", "message"), [
    ({"scans": "nowhere.csv", "side": 16}, "nowhere.csv: no such scan file or folder"),
    ({"side": 16}, "a replay needs data.scans"),
    ({"scans": "SCANS", "side": 16, "fractions": [0.3, 0.1]}, "data.fractions must be increasing fractions"),
    ({"scans": "SCANS", "side": 16, "basis": "fourier"}, "data.basis must be one of"),
    ({"scans": "SCANS", "side": 12}, "data.basis 'haar' at side 12"),
    ({"scans": "SCANS", "side": 32}, "a haar scan of 32 x 32 images has 1024 values"),
    ({"scans": "SCANS", "side": 16, "photons": 3}, "unknown data option(s) ['photons']"),
])
def test_bad_replay_data_is_refused_at_config_time(scans, tmp_path, data, message):
    """Every scan is read when the config is (the experiment's own checks; the schema repeats the simple ones)."""
    data = {k: str(scans) if v == "SCANS" else v for k, v in data.items()}
    with pytest.raises(ValueError) as info:
        ReplayExperiment.from_config("disc", {"data": data}, {})
    assert message in str(info.value) and str(info.value).startswith("experiments.disc.data: ")
    config = {"experiments": {"disc": {"kind": "replay", "data": {"side": 16}, "replicates": 1,
                                       "methods": ["wavelet_tree"]}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(Exception, match="'scans' is a required property"):
        load_config(tmp_path / "config.yaml")


def test_config_takes_a_replay_and_keeps_the_tree_to_scans(scans, tmp_path):
    config = {"experiments": {"disc": {"kind": "replay", "data": {"scans": str(scans), "side": 16},
                                       "replicates": 2, "methods": ["wavelet_tree", "gss_ep_scales"]}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    run = resolve_experiment(load_config(tmp_path / "config.yaml"), "disc")
    assert isinstance(run.experiment, ReplayExperiment) and run.hyperparameters == ("learned",)
    assert run.strategies == ("design", "topdown", "predict", "random") and run.n_steps == 48
    for change, message in [({"replicates": 3}, "its data has 2 scan(s)"),
                            ({"n_steps": 5}, "a replay runs to its last fraction (48 steps)"),
                            ({"hyperparameters": ["oracle"]}, "there is no oracle")]:
        entry = {**config["experiments"]["disc"], **change}
        (tmp_path / "config.yaml").write_text(yaml.safe_dump({"experiments": {"disc": entry}}))
        with pytest.raises(ValueError) as info:
            resolve_experiment(load_config(tmp_path / "config.yaml"), "disc")
        assert message in str(info.value)
    e7 = {"experiments": {"E7": {"replicates": 1, "methods": ["wavelet_tree"]}}}
    with pytest.raises(ValueError, match="fit only basis scans"):
        resolve_experiment(e7, "E7")


def test_a_numerical_failure_is_recorded_not_raised(scans, monkeypatch):
    """A fit that fails numerically in a replay is a failed replicate in the job's results, as in a design loop."""
    import adaptcs.experiments.scan as scan

    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise np.linalg.LinAlgError("singular")
        return replay_basis_scan(*args, **kwargs)

    monkeypatch.setattr(scan, "replay_basis_scan", failing)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = run_job("disc", 0, "gss_ep_scales", "topdown", [0, 1], data_options=options(scans),
                      hyperparameters="learned")
    assert job.failure.tolist() == ["", "LinAlgError: singular"]
    assert np.all(np.isfinite(job.errors[0])) and np.all(np.isnan(job.errors[1]))
    assert np.all(np.isnan(job.checkpoint_coef[1])) and job.converged[1].tolist() == [-1, -1, -1]


def test_a_replay_of_another_depth(tmp_path):
    camera = make_basis("haar", 16, level=1)  # an 8 x 8 approximation, as the camera scans
    image = np.random.default_rng(0).uniform(0.1, 0.9, camera.d)
    np.savetxt(tmp_path / "scan.csv", photon_basis_scan(camera, image, 1e4, np.random.default_rng(1)))
    experiment = ReplayExperiment.from_options("cam", {"scans": str(tmp_path / "scan.csv"), "side": 16, "level": 1})
    assert experiment.basis(0).level == 1 and experiment.settings == ({"basis": "haar", "side": 16, "level": 1},)
    assert experiment.n_initial == 64
    assert np.isfinite(experiment.scan_values(0)).all()
    with pytest.raises(ValueError, match="data.level"):
        ReplayExperiment.from_options("cam", {"scans": str(tmp_path / "scan.csv"), "side": 16, "level": "deep"})
    with pytest.raises(ValueError, match="level must be in"):
        ReplayExperiment.from_options("cam", {"scans": str(tmp_path / "scan.csv"), "side": 16, "level": 9})


def test_a_le_gall_scan_replays_in_the_workflow(tmp_path):
    """A recorded Le Gall 5/3 scan (bior2.2, depth 2): the config takes it, and the job reconstructs by the
    synthesis, design ahead of top-down."""
    basis = make_basis("bior2.2", 32, level=2)
    r, c = np.mgrid[:32, :32]
    image = (0.2 + 0.6 * ((r - 12) ** 2 + (c - 19) ** 2 < 64)).ravel()
    (tmp_path / "scans").mkdir()
    np.savetxt(tmp_path / "scans" / "scan0.csv", photon_basis_scan(basis, image, 1e4, np.random.default_rng(0)))
    data = {"scans": str(tmp_path / "scans"), "side": 32, "basis": "bior2.2", "level": 2}
    config = {"experiments": {"lg": {"kind": "replay", "data": data, "replicates": 1,
                                     "methods": ["wavelet_tree_prediction"]}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    run = resolve_experiment(load_config(tmp_path / "config.yaml"), "lg")
    assert run.experiment.basis(0).wavelet == "bior2.2" and run.experiment.basis(0).level == 2
    errors = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for strategy in ("design", "topdown"):
            job = run_job("lg", 0, "wavelet_tree_prediction", strategy, [0], data_options={"kind": "replay", **data},
                          hyperparameters="learned")
            assert np.all(job.converged >= 0)
            errors[strategy] = job.errors[0]
    assert np.all(errors["design"] < errors["topdown"]) and errors["design"][-1] < 0.2
