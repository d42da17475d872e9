"""Report captions are made from the config: every figure and table of a run has one, saying what is plotted,
over how many replicates and with which settings."""

from pathlib import Path

import pytest
import yaml

from adaptcs.captions import figure_caption, table_caption
from adaptcs.config import resolve

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["config.yaml", "all-methods.yaml", "paper.yaml"])
def test_every_figure_and_table_of_a_config_has_a_caption(name):
    config = yaml.safe_load((REPO / "config" / name).read_text())
    for experiment, run in resolve(config).items():
        for kind in run.experiment.figures:
            caption = figure_caption(run, kind)
            assert caption.startswith(f"{experiment}: ") and f"{run.replicates} replicate" in caption
        assert "sample standard deviation" in table_caption(run)


def test_captions_describe_the_run_they_belong_to():
    runs = resolve(yaml.safe_load((REPO / "config" / "all-methods.yaml").read_text()))
    e6 = figure_caption(runs["E6"], "curves")
    assert "prior knowledge" in e6 and "designed rows" not in e6  # E6 compares prior knowledge, random rows only
    e7 = figure_caption(runs["E7"], "curves")
    assert "wavelet top-down rows (coarse scales first), dash-dot" in e7 and "PCA rows of training images, dotted" in e7
    assert "learned (from the measurements alone)" in e7
    assert "at several numbers of measurement rows" in figure_caption(runs["E5"], "images")
    assert "at several numbers of measurement rows" not in figure_caption(runs["E4"], "images")
    assert "colour bar" in figure_caption(runs["E4"], "importance")
    assert "shown only from 6 replicates" in table_caption(runs["E1"])
    with pytest.raises(ValueError, match="no caption for figure kind"):
        figure_caption(runs["E1"], "histogram")
