"""Experiments on the user's own signals: loading, groups, the oracle's limits, and a job."""

import warnings

import numpy as np
import pytest
from skimage.io import imsave

from adaptcs.experiments import problem_manifest, run_job
from adaptcs.experiments.user import UserExperiment, load_images, user_case


@pytest.fixture
def image_folder(tmp_path):
    rng = np.random.default_rng(0)
    pixels = np.zeros((3, 8, 8))
    pixels[:, 2:5, 3:6] = rng.integers(100, 256, size=(3, 3, 3))
    for i, image in enumerate(pixels.astype(np.uint8)):
        if i == 1:  # colour and transparency are reduced to grey
            image = np.dstack([image, image, image, np.full_like(image, 255)])
        imsave(tmp_path / f"img{i}.png", image, check_contrast=False)
    (tmp_path / "notes.txt").write_text("not an image")
    return tmp_path, pixels / 255.0


def test_images_are_read_in_name_order_as_grey_values(image_folder):
    folder, pixels = image_folder
    loaded = load_images(str(folder), 8)  # no resizing: the pixel values themselves
    np.testing.assert_allclose(loaded, pixels.reshape(3, 64), atol=1e-6)
    small = load_images(str(folder), 4)
    assert small.shape == (3, 16) and small.min() >= 0.0 and small.max() <= 1.0
    # a 2x downscale keeps the mean brightness (anti-aliased resize, not subsampling)
    np.testing.assert_allclose(small.mean(axis=1), pixels.reshape(3, 64).mean(axis=1), rtol=0.05)


def test_signals_from_npy_with_block_or_file_groups(tmp_path):
    signals = np.zeros((3, 24))
    signals[:, 4:8] = 1.0
    np.save(tmp_path / "s.npy", signals)
    np.savetxt(tmp_path / "g.csv", np.arange(24) % 6, fmt="%d")
    blocks = UserExperiment.from_options("sig", {"signals": str(tmp_path / "s.npy"), "groups": {"blocks": 4}})
    np.testing.assert_array_equal(blocks.groups_array(), np.arange(24) // 4)
    from_file = UserExperiment.from_options("sig", {"signals": str(tmp_path / "s.npy"),
                                                    "groups": {"file": str(tmp_path / "g.csv")}})
    np.testing.assert_array_equal(from_file.groups_array(), np.arange(24) % 6)
    case = user_case(blocks, 1)
    assert case.problem.X.shape == (32, 24) and case.prior.p0_group == pytest.approx(1 / 6)
    assert blocks.figures == ("curves", "example")
    np.testing.assert_array_equal(user_case(blocks, 1).problem.y, case.problem.y)  # seeded by name and replicate


@pytest.mark.parametrize("options, match", [
    ({}, "exactly one of data.images"),
    ({"images": "x", "signals": "y.npy", "side": 4}, "exactly one of"),
    ({"images": "x"}, "data.side"),
    ({"images": "x", "side": 4, "groups": {"blocks": 2, "file": "g.csv"}}, "data.groups must be one of"),
    ({"images": "x", "side": 4, "groups": {"similarity": "x"}}, "data.groups must be one of"),
    ({"images": "x", "side": 4, "colour": True}, "unknown data option"),
    ({"images": "x", "side": 4, "noise_var": 0}, "noise_var must be > 0"),
    ({"signals": "y.npy", "basis": "haar"}, "needs data.images"),
    ({"images": "x", "side": 16, "basis": "fourier"}, "data.basis must be one of"),
    ({"images": "x", "side": 16, "basis": "haar", "groups": {"blocks": 2}}, "groups are the basis's"),
    ({"images": "x", "side": 12, "basis": "haar"}, "data.basis 'haar' at side 12"),
])
def test_bad_user_options(options, match):
    with pytest.raises(ValueError, match=match):
        UserExperiment.from_options("mine", options)


def test_a_user_job_and_the_oracles_limit(tmp_path):
    rng = np.random.default_rng(1)
    sparse = np.where(np.arange(48) // 4 < 2, rng.uniform(0.5, 1.0, (2, 48)), 0.0)
    dense = rng.uniform(0.1, 1.0, (2, 48))
    np.save(tmp_path / "sparse.npy", sparse)
    np.save(tmp_path / "dense.npy", dense)
    options = {"kind": "user", "signals": str(tmp_path / "sparse.npy"), "groups": {"blocks": 4}, "n_initial": 12,
               "noise_var": 1e-4}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        design = run_job("mine", 0, "gss_ep", "design", [0, 1], n_steps=4, data_options=options,
                         hyperparameters="oracle")
        random = run_job("mine", 0, "gss_ep", "random", [0, 1], n_steps=4, data_options=options,
                         hyperparameters="oracle")
    np.testing.assert_array_equal(design.n_measurements, [12, 13, 14, 15, 16])
    np.testing.assert_array_equal(design.errors[:, 0], random.errors[:, 0])  # the same initial measurements
    np.testing.assert_array_equal(design.w_true, sparse)
    assert design.psnr is None and design.config["data_options"]["signals"].endswith("sparse.npy")
    assert list(problem_manifest("mine", [0, 1], data_options=options)["n_nonzero"]) == [8, 8]
    with pytest.raises(ValueError, match="oracle hyper-parameters need exactly group-sparse signals"):
        run_job("mine", 0, "gss_ep", "design", [0], n_steps=1, hyperparameters="oracle",
                data_options={**options, "signals": str(tmp_path / "dense.npy")})


@pytest.mark.slow
def test_user_images_in_a_basis_run_like_e7(tmp_path):
    from skimage import data as skdata

    from adaptcs.bases.images import make_basis
    from adaptcs.config import load_config, resolve_experiment

    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("camera", "moon"):
        imsave(folder / f"{name}.png", getattr(skdata, name)()[::16, ::16], check_contrast=False)
    options = {"kind": "user", "images": str(folder), "side": 16, "basis": "haar", "n_initial": 16}
    spec = UserExperiment.from_options("photos", options)
    basis = make_basis("haar", 16)
    np.testing.assert_array_equal(spec.groups_array(), basis.groups())
    assert spec.strategies == ("design", "random", "topdown", "predict") and spec.basis(0).d == 256
    np.testing.assert_allclose(spec.fixed_rows(0, "topdown", 8), basis.coarse_to_fine(8))
    with pytest.raises(ValueError, match="no oracle"):
        spec.check_oracle()
    errors = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for strategy in ("design", "topdown", "predict"):
            result = run_job("photos", 0, "gss_ep_scales", strategy, [0, 1], n_steps=16, data_options=options,
                             hyperparameters="learned")
            errors[strategy] = result.errors
    # the same initial rows for every strategy, the image (pixels) is the truth, and the rows pay off
    np.testing.assert_array_equal(errors["design"][:, 0], errors["topdown"][:, 0])
    assert result.w_true.shape == (2, 256) and result.psnr is not None
    assert np.all(errors["design"][:, -1] < 0.6 * errors["design"][:, 0])
    # the config layer takes it (schema and checks): by default the four strategies
    import yaml

    config = {"experiments": {"photos": {"kind": "user", "data": {k: v for k, v in options.items() if k != "kind"},
                                         "replicates": 2, "methods": ["gss_ep_scales"],
                                         "hyperparameters": ["learned"]}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    run = resolve_experiment(load_config(tmp_path / "config.yaml"), "photos")
    assert run.strategies == ("design", "random", "topdown", "predict")
    config["experiments"]["photos"]["methods"] = ["gss_ep_profile"]  # a profile needs training images
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match="need a profile of the scales from training images; photos has none"):
        resolve_experiment(load_config(tmp_path / "config.yaml"), "photos")


def test_unusable_images_are_errors_naming_the_file_and_changes_are_said(tmp_path, caplog):
    import imageio.v3 as iio

    from adaptcs.experiments.user import read_grey_image

    rng = np.random.default_rng(0)
    grey = (rng.random((16, 16)) * 255).astype(np.uint8)
    iio.imwrite(tmp_path / "ok.png", grey)
    (tmp_path / "corrupt.png").write_bytes((tmp_path / "ok.png").read_bytes()[:60])
    iio.imwrite(tmp_path / "anim.gif", (rng.random((3, 16, 16, 3)) * 255).astype(np.uint8), extension=".gif")
    for name, match in (("corrupt.png", "cannot be read as an image"), ("anim.gif", "has 3 frames")):
        with pytest.raises(ValueError, match=match) as info:
            read_grey_image(tmp_path / name)
        assert name in str(info.value)
    # grey + alpha and RGBA: composited on white; a float image outside [0, 1]: mapped onto it; never silent
    iio.imwrite(tmp_path / "ga.png", np.stack([grey, np.full_like(grey, 128)], -1))
    iio.imwrite(tmp_path / "rgba.png", np.stack([grey, grey, grey, np.full_like(grey, 128)], -1))
    iio.imwrite(tmp_path / "float.tif", rng.normal(size=(16, 16)).astype(np.float32))
    with caplog.at_level("WARNING"):
        ga, rgba = read_grey_image(tmp_path / "ga.png"), read_grey_image(tmp_path / "rgba.png")
        flt = read_grey_image(tmp_path / "float.tif")
    alpha = 128 / 255
    np.testing.assert_allclose(ga, grey / 255 * alpha + 1 - alpha, atol=1e-12)
    np.testing.assert_allclose(rgba, ga, atol=1e-3)  # the same grey through the colour path
    assert flt.min() == 0.0 and flt.max() == 1.0
    assert caplog.text.count("composited on a white background") == 2 and "mapped linearly" in caplog.text
    # a non-square image is cropped to its central square (never stretched), and says so
    wide = (rng.random((16, 24)) * 255).astype(np.uint8)
    iio.imwrite(tmp_path / "wide.png", wide)
    with caplog.at_level("WARNING"):
        np.testing.assert_allclose(read_grey_image(tmp_path / "wide.png"), wide[:, 4:20] / 255)
    assert "cropped to its central 16 x 16 square" in caplog.text


def test_an_all_black_image_fails_when_the_config_is_read(tmp_path):
    import yaml

    from adaptcs.config import load_config, resolve_experiment

    folder = tmp_path / "photos"
    folder.mkdir()
    imsave(folder / "a.png", np.full((8, 8), 200, np.uint8), check_contrast=False)
    imsave(folder / "b.png", np.zeros((8, 8), np.uint8), check_contrast=False)
    config = {"experiments": {"photos": {"kind": "user", "data": {"images": str(folder), "side": 8},
                                         "replicates": 2, "methods": ["gss_ep"], "hyperparameters": ["learned"]}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    load_images.cache_clear()
    with pytest.raises(ValueError, match="b.png: the image is all black"):
        resolve_experiment(load_config(tmp_path / "config.yaml"), "photos")
