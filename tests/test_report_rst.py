"""The report's image directive: the file itself in the page (checked by decoding it back), an error for a
missing file."""

import base64
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from docutils.core import publish_parts  # noqa: E402
from docutils.utils import SystemMessage  # noqa: E402

from adaptcs.report_rst import register  # noqa: E402


def test_image_is_embedded_byte_for_byte(tmp_path):
    png = tmp_path / "figure.png"
    fig = plt.figure(figsize=(1, 1))
    fig.savefig(png)
    plt.close(fig)
    register()
    html = publish_parts(f".. adaptcs-image:: {png}\n   :width: 720px\n", writer_name="html")["body"]
    encoded = re.search(r'src="data:image/png;base64,([^"]+)"', html).group(1)
    assert base64.b64decode(encoded) == png.read_bytes()
    assert 'alt="figure.png"' in html and "720px" in html and str(tmp_path) not in html


def test_missing_file_is_an_error_naming_it(tmp_path):
    register()
    with pytest.raises(SystemMessage, match="no such file .*nothing.png"):
        publish_parts(f".. adaptcs-image:: {tmp_path / 'nothing.png'}\n", writer_name="html",
                      settings_overrides={"halt_level": 2})
