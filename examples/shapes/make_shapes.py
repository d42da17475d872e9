"""Make the example images of the ``user`` experiment: simple bright shapes on a black background (32 x 32 PNG).

``images/`` holds the 6 images the example reconstructs, ``grouping/`` 40 other images of the same kind that
only build the similarity groups (as E4's grouping digits do). Deterministic (seeded); run from the repository
root: ``python examples/shapes/make_shapes.py``.
"""

from pathlib import Path

import numpy as np
from skimage.draw import disk, polygon, rectangle
from skimage.io import imsave

SIDE = 32


def shape_image(rng: np.random.Generator) -> np.ndarray:
    """One or two filled shapes (disk, rectangle, triangle) of random size, place and brightness."""
    image = np.zeros((SIDE, SIDE))
    for _ in range(rng.integers(1, 3)):
        kind = rng.integers(3)
        centre = rng.integers(8, SIDE - 8, size=2)
        size = rng.integers(3, 7)
        if kind == 0:
            rr, cc = disk(tuple(centre), size, shape=image.shape)
        elif kind == 1:
            rr, cc = rectangle(tuple(centre - size), extent=(size + rng.integers(1, 6), size), shape=image.shape)
        else:
            rr, cc = polygon(centre[0] + np.array([-size, size, size]), centre[1] + np.array([0, -size, size]),
                             shape=image.shape)
        image[rr, cc] = rng.uniform(0.5, 1.0)
    return image


def main() -> None:
    rng = np.random.default_rng(2013)
    here = Path(__file__).parent
    for folder, count in (("images", 6), ("grouping", 40)):
        (here / folder).mkdir(exist_ok=True)
        for i in range(count):
            imsave(here / folder / f"shape{i:02d}.png", (255 * shape_image(rng)).astype(np.uint8),
                   check_contrast=False)


if __name__ == "__main__":
    main()
