"""The hidden Markov tree prior on basis scans: exact against enumeration with dense Gaussians, EM, design."""

import itertools

import numpy as np
import pytest

from adaptcs.bases.images import make_basis
from adaptcs.models.wavelet_tree import WaveletTree, WaveletTreeSpikeSlab, decay_profile


def enumerate_posterior(tree, X, y, p_on, p_off, v0, s2, v_small=None, on_mean=None, on_var=None,
                        noise_weight=None):
    """Every state of the detail groups: prior from the chain, likelihood from the dense Gaussian
    N(y | X m(z), X diag(v(z)) X^T + s2 diag(w)). Returns the log evidence, P(z_g = 1 | y) and the posterior mean
    and marginal variances of c. ``on_mean`` and ``on_var`` (shape (d,)) replace the "on" state's prior mean 0
    and variance v0[scale]; ``noise_weight`` (shape (n,)) scales each measurement's noise variance."""
    n_groups = tree.group_scale.shape[0]
    detail = np.flatnonzero(tree.group_scale > 0)
    scale_of = tree.group_scale[tree.coef_group]
    states = np.array(list(itertools.product((0, 1), repeat=detail.size)))
    log_joint, prob = [], np.zeros(n_groups)
    means, seconds = [], []
    for state in states:
        z = np.ones(n_groups, dtype=int)
        z[detail] = state
        log_prior = 0.0
        for g in detail:
            parent_on = True if tree.parent[g] < 0 else bool(z[tree.parent[g]])
            p = (p_on if parent_on else p_off)[tree.group_scale[g] - 1]
            log_prior += np.log(p if z[g] else 1 - p)
        off = 0.0 if v_small is None else v_small[scale_of]
        on = z[tree.coef_group] == 1
        prior_var = np.where(on, v0[scale_of] if on_var is None else on_var, off)
        prior_mean = np.where(on, 0.0 if on_mean is None else on_mean, 0.0)
        noise = s2 * (np.ones(len(y)) if noise_weight is None else noise_weight)
        C = (X * prior_var) @ X.T + np.diag(noise)
        sign, logdet = np.linalg.slogdet(C)
        alpha = np.linalg.solve(C, y - X @ prior_mean)
        log_joint.append(log_prior - 0.5 * (len(y) * np.log(2 * np.pi) + logdet + (y - X @ prior_mean) @ alpha))
        K = X * prior_var  # (n, d): rows of X times the prior variances
        m = prior_mean + K.T @ alpha
        v = prior_var - np.einsum("ij,ij->j", K, np.linalg.solve(C, K))
        means.append(m)
        seconds.append(v + m**2)
    log_joint = np.array(log_joint)
    log_z = np.logaddexp.reduce(log_joint)
    weight = np.exp(log_joint - log_z)
    prob[detail] = weight @ states
    prob[tree.group_scale == 0] = 1.0
    mean = weight @ np.array(means)
    var = weight @ np.array(seconds) - mean**2
    return log_z, prob, mean, var


def small_scan(seed=0, repeat=True, side=8):
    """Side 8: a 2 x 2 approximation and 15 detail groups; side 4: one approximation coefficient and 15 detail
    coefficients (32,768 states either way, with groups or with coefficients as the states)."""
    basis = make_basis("haar", side, level=2)
    rng = np.random.default_rng(seed)
    measured = rng.choice(basis.d, size=30 * basis.d // 64, replace=False)
    if repeat:
        measured = np.append(measured, measured[:3])  # three coefficients measured twice
    gains = rng.uniform(0.5, 2.0, size=measured.size) * rng.choice([-1, 1], size=measured.size)
    X = np.zeros((measured.size, basis.d))
    X[np.arange(measured.size), measured] = gains
    c = rng.normal(size=basis.d) * np.where(basis.scales() < 2, 1.0, 0.2)
    y = X @ c + rng.normal(0, 0.3, size=measured.size)
    return basis, X, y


def test_tree_structure_of_a_haar_basis():
    basis = make_basis("haar", 16)  # level 2: 4 x 4 approximation, details 4 x 4 and 8 x 8
    tree = WaveletTree(basis)
    roots, fine = tree.levels
    assert roots.size == 3 * 4 and fine.size == 3 * 16
    assert np.all(tree.parent[roots] == -1) and np.all(np.isin(tree.parent[fine], roots))
    assert np.all(np.bincount(tree.parent[fine], minlength=tree.parent.size)[roots] == 4)  # a quadtree
    # the parent of a fine group is the group of its parent coefficient: check one by hand. Coefficient order:
    # 16 approximation, then level 1 (4 x 4, h v d per position), then level 2 (8 x 8)
    child = 16 + 48 + 3 * (8 * 5 + 6) + 2  # level 2, row 5, col 6, diagonal
    parent_coef = 16 + 3 * (4 * 2 + 3) + 2  # level 1, row 2, col 3, diagonal
    assert tree.parent[tree.coef_group[child]] == tree.coef_group[parent_coef]


@pytest.mark.parametrize("states, side", [("groups", 8), ("coefficients", 4)])
@pytest.mark.parametrize("repeat, v_small", [(False, None), (True, np.array([0.0, 0.02, 0.004]))])
def test_exact_against_enumeration(repeat, v_small, states, side):
    basis, X, y = small_scan(repeat=repeat, side=side)
    p_on, p_off, v0, s2 = np.array([0.8, 0.6]), np.array([0.3, 0.15]), np.array([2.0, 1.0, 0.05]), 0.09
    est = WaveletTreeSpikeSlab(basis, states=states, p_on=p_on, p_off=p_off, v0=v0, noise_var=s2, learn=(),
                               v_small=0.0 if v_small is None else v_small).fit(X, y)
    log_z, prob, mean, var = enumerate_posterior(WaveletTree(basis, states), X, y, p_on, p_off, v0, s2, v_small)
    np.testing.assert_allclose(est.log_evidence_, log_z, rtol=1e-10)
    np.testing.assert_allclose(est.group_prob_, prob, atol=1e-10)
    np.testing.assert_allclose(est.coef_, mean, atol=1e-10)
    np.testing.assert_allclose(est.coef_var_, var, atol=1e-10)
    assert est.converged_


def test_em_increases_the_evidence_and_learned_values_are_a_fixed_point():
    basis, X, y = small_scan(seed=3)
    learn = ("p_on", "p_off", "v0", "v_small", "noise_var")
    evidence = [WaveletTreeSpikeSlab(basis, max_iter=k, learn=learn).fit(X, y).log_evidence_
                for k in (1, 2, 5, 20, 100)]
    # each fit reports the evidence of the posterior it used; EM's evidence never decreases
    assert np.all(np.diff(evidence) > -1e-9)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = WaveletTreeSpikeSlab(basis, max_iter=5000, tol=1e-7).fit(X, y)
    again = WaveletTreeSpikeSlab(basis, p_on=est.p_on_, p_off=est.p_off_, v0=est.v0_, noise_var=est.noise_var_,
                                 learn=()).fit(X, y)
    assert again.log_evidence_ == pytest.approx(est.log_evidence_, abs=1e-9)
    # nudging any learned value lowers the evidence (a maximum, not just a fixed point of EM)
    for name in ("v0", "noise_var"):
        value = getattr(est, f"{name}_")
        for factor in (0.9, 1.1):
            nudged = WaveletTreeSpikeSlab(basis, p_on=est.p_on_, p_off=est.p_off_, v0=est.v0_,
                                          noise_var=est.noise_var_, learn=()).set_params(**{name: value * factor})
            assert nudged.fit(X, y).log_evidence_ < est.log_evidence_


def simulate_tree(basis, p_on, p_off, v0, rng, states):
    tree = WaveletTree(basis, states)
    z = np.ones(tree.group_scale.size, dtype=int)
    for s, level in enumerate(tree.levels, start=1):
        parent_on = np.ones(level.size, dtype=bool) if s == 1 else z[tree.parent[level]] == 1
        p = np.where(parent_on, p_on[s - 1], p_off[s - 1])
        z[level] = rng.random(level.size) < p
    scale_of = tree.group_scale[tree.coef_group]
    return z[tree.coef_group] * rng.normal(size=basis.d) * np.sqrt(v0[scale_of]), z


@pytest.mark.parametrize("states", ["groups", "coefficients"])
def test_learns_the_tree_from_a_full_scan(states):
    basis = make_basis("haar", 64)  # 4 levels, 1,365 detail groups (4,080 detail coefficients)
    rng = np.random.default_rng(7)
    p_on, p_off = np.array([0.9, 0.7, 0.5, 0.4]), np.array([0.5, 0.2, 0.1, 0.05])
    v0 = np.array([100.0, 10.0, 3.0, 1.0, 0.3])
    c, z = simulate_tree(basis, p_on, p_off, v0, rng, states)
    est = WaveletTreeSpikeSlab(basis, states=states).fit(np.eye(basis.d), c + rng.normal(0, 0.1, basis.d))
    assert est.converged_
    assert est.noise_var_ == pytest.approx(0.01, rel=0.15)
    np.testing.assert_allclose(est.v0_[1:], v0[1:], rtol=0.35)
    # against the transitions the draw actually made, where at least 30 parents were in that state
    tree = WaveletTree(basis, states)
    for s, level in enumerate(tree.levels[1:], start=2):
        parent = z[tree.parent[level]]
        for state, learned in ((1, est.p_on_), (0, est.p_off_)):
            if np.sum(parent == state) >= 30:
                assert learned[s - 1] == pytest.approx(np.mean(z[level][parent == state]), abs=0.08), (s, state)


@pytest.mark.parametrize("states", ["groups", "coefficients"])
def test_children_of_a_large_coefficient_are_the_most_uncertain(states):
    # a top-down scan to the end of level 1; then the unmeasured fine coefficients under a large parent have a
    # larger posterior variance than those under a negligible parent: what designed basis rows follow
    basis = make_basis("haar", 16)
    tree = WaveletTree(basis, states)
    scales = basis.scales()
    c = np.where(scales == 0, 3.0, 0.0)
    roots = tree.levels[0]
    big = roots[0]
    c[tree.coef_group == big] = 2.0
    measured = np.flatnonzero(scales <= 1)
    X = np.eye(basis.d)[measured]
    est = WaveletTreeSpikeSlab(basis, states=states, p_on=[0.5, 0.8], p_off=[0.5, 0.05], v0=[10.0, 4.0, 1.0],
                               noise_var=0.01, learn=()).fit(X, c[measured])
    under_big = np.isin(tree.coef_group, np.flatnonzero(tree.parent == big))
    fine = scales == 2
    assert est.coef_var_[fine & under_big].min() > 5 * est.coef_var_[fine & ~under_big].max()


def test_refuses_rows_that_are_not_a_selection():
    basis = make_basis("haar", 8)
    with pytest.raises(ValueError, match="each measure one coefficient"):
        WaveletTreeSpikeSlab(basis).fit(np.ones((3, 64)), np.ones(3))
    with pytest.raises(ValueError, match="WaveletBasis"):
        WaveletTreeSpikeSlab(make_basis("dct", 8)).fit(np.eye(64)[:3], np.ones(3))
    with pytest.raises(ValueError, match="learn may name"):
        WaveletTreeSpikeSlab(basis, learn=("p0",)).fit(np.eye(64)[:3], np.ones(3))


def test_decay_profile_is_the_maximum_of_its_objective():
    from scipy.optimize import minimize

    W, S = np.array([12.0, 40.0, 0.0, 150.0]), np.array([30.0, 20.0, 0.0, 4.0])
    index = np.arange(4.0)

    def negative(theta):
        t = theta[0] - theta[1] * index
        return -np.sum(-0.5 * W * t - 0.5 * S * np.exp(-t))

    best = minimize(negative, x0=[0.0, 0.0], method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-12,
                                                                            "maxiter": 10000}).x
    np.testing.assert_allclose(decay_profile(W, S, np.ones(4)), np.exp(best[0] - best[1] * index), rtol=1e-6)
    # one scale with data: the slope is kept, the level fitted (v = S / W there)
    one = decay_profile(np.array([0.0, 8.0, 0.0]), np.array([0.0, 2.0, 0.0]), np.array([4.0, 1.0, 0.25]))
    np.testing.assert_allclose(one, [1.0, 0.25, 0.0625])


@pytest.mark.parametrize("noise", ["constant", "photon"])
def test_prediction_posterior_is_exact_given_its_prediction(noise):
    # fixed hyper-parameters: the fit iterates prediction <- posterior mean to a fixed point; given that
    # prediction (prior mean beta p, variance v0 + kappa p^2 in the on state) the posterior must equal the dense
    # enumeration, and the prediction must be the wavelet prediction of the posterior mean it reports
    from adaptcs.bases.prediction import predicted_coefficients

    basis, X, y = small_scan(seed=5, side=8)
    approximation = np.flatnonzero(basis.scales() == 0)
    X = np.vstack([np.eye(basis.d)[approximation], X])  # the photon model needs the approximation measured
    y = np.concatenate([[4.0, 3.0, 5.0, 2.0], y])
    p_on, p_off, v0, s2 = np.array([0.8, 0.6]), np.array([0.3, 0.15]), np.array([2.0, 1.0, 0.05]), 0.09
    est = WaveletTreeSpikeSlab(basis, states="groups", p_on=p_on, p_off=p_off, v0=v0, noise_var=s2, learn=(),
                               prediction=True, noise=noise, tol=1e-12, max_iter=1000).fit(X, y)
    assert est.converged_
    expected = predicted_coefficients(basis, est.coef_)
    detail = basis.scales() > 0
    np.testing.assert_allclose(est.prediction_[detail], expected[detail], atol=1e-9)
    assert np.any(np.abs(est.prediction_) > 0.1)  # the test means something: the prediction is not ~0
    scale_of = basis.scales()
    columns = np.abs(X).argmax(axis=1)
    log_z, prob, mean, var = enumerate_posterior(
        WaveletTree(basis, "groups"), X, y, p_on, p_off, v0, s2, on_mean=est.beta_[scale_of] * est.prediction_,
        on_var=v0[scale_of] + est.kappa_ * est.prediction_**2, noise_weight=est.noise_weight_[columns])
    np.testing.assert_allclose(est.log_evidence_, log_z, rtol=1e-10)
    np.testing.assert_allclose(est.group_prob_, prob, atol=1e-10)
    np.testing.assert_allclose(est.coef_, mean, atol=1e-9)
    np.testing.assert_allclose(est.coef_var_, var, atol=1e-9)


def test_prediction_gain_and_variance_are_learned_from_a_scan_of_the_model():
    # details drawn scale by scale from the prediction of the coarser (true) image: c = beta p + N(0, v0 + kappa
    # p^2), every detail on; a full scan with small noise must give back beta per scale and kappa
    from adaptcs.bases.prediction import predicted_coefficients

    basis = make_basis("haar", 64, level=3)
    rng = np.random.default_rng(11)
    scales = basis.scales()
    image = np.add.outer(np.sin(np.arange(64) / 5.0), np.cos(np.arange(64) / 7.0)).ravel() + 3.0
    c = np.where(scales == 0, basis.analyze(image), 0.0)
    beta, v0, kappa = {1: 0.8, 2: 0.9, 3: 1.1}, {1: 1e-3, 2: 2e-4, 3: 4e-5}, 0.4
    for s in (1, 2, 3):
        p = predicted_coefficients(basis, c)[scales == s]
        c[scales == s] = beta[s] * p + rng.normal(size=p.size) * np.sqrt(v0[s] + kappa * p**2)
    est = WaveletTreeSpikeSlab(basis, p_on=1 - 1e-6, p_off=1 - 1e-6, learn=("v0", "noise_var"), prediction=True,
                               max_iter=2000).fit(np.eye(basis.d), c + rng.normal(0, 1e-4, basis.d))
    assert est.converged_
    np.testing.assert_allclose(est.beta_[1:], [beta[1], beta[2], beta[3]], atol=0.1)
    assert est.kappa_ == pytest.approx(kappa, rel=0.2)


def test_photon_noise_weights_are_the_light_of_each_pattern():
    basis = make_basis("db2", 16, level=2)
    image = np.linspace(0.2, 1.0, basis.d)
    values = basis.analyze(image)
    est = WaveletTreeSpikeSlab(basis, noise="photon", learn=()).fit(np.eye(basis.d), values)
    approximation_image = basis.synthesize(np.where(basis.scales() == 0, values, 0.0))
    light = np.abs(basis.synthesize(np.eye(basis.d))) @ np.maximum(approximation_image, 0.0)  # brute force
    np.testing.assert_allclose(est.noise_weight_, light / light.mean(), rtol=1e-10)
    with pytest.raises(ValueError, match="intensities"):
        WaveletTreeSpikeSlab(basis, noise="photon", learn=()).fit(np.eye(basis.d), -values)


def test_a_dark_pattern_keeps_a_tenth_of_the_mean_light_as_its_noise_weight():
    """Dark counts and read noise: a pattern over a black region is not taken as noise-free (a floor of 1e-3 made
    fits of black-background scans markedly worse, docs/log/results.md)."""
    basis = make_basis("haar", 16, level=2)
    image = np.zeros((16, 16))
    image[:, 8:] = np.linspace(0.5, 1.0, 8)  # the left half black
    values = basis.analyze(image.ravel())
    est = WaveletTreeSpikeSlab(basis, noise="photon", learn=()).fit(np.eye(basis.d), values)
    approximation_image = basis.synthesize(np.where(basis.scales() == 0, values, 0.0))
    light = np.abs(basis.synthesize(np.eye(basis.d))) @ np.maximum(approximation_image, 0.0)  # brute force
    relative = light / light.mean()
    assert np.sum(relative < 0.1) >= basis.d // 4  # the patterns over the black half collect no light
    np.testing.assert_allclose(est.noise_weight_, np.maximum(relative, 0.1), rtol=1e-10)


@pytest.mark.parametrize("prediction", [False, True])
def test_a_known_photon_count_gives_each_value_the_simulated_cameras_variance(prediction):
    """With ``photons`` the noise is not learned: a value's variance is its pattern's light over the photon count,
    and for the approximation's patterns (whose light the approximation image holds exactly) that is the variance
    of the simulated camera, ``(a+ . x + a- . x) / photons``, summed over the dense patterns."""
    basis = make_basis("haar", 16, level=2)
    image = np.random.default_rng(5).uniform(0.1, 1.0, basis.d)
    values = basis.analyze(image)
    photons = 250.0
    est = WaveletTreeSpikeSlab(basis, noise="photon", photons=photons, prediction=prediction).fit(np.eye(basis.d),
                                                                                                   values)
    variance = est.noise_var_ * est.noise_weight_
    patterns = basis.synthesize(np.eye(basis.d))  # row j: basis image j in pixels
    camera = (np.maximum(patterns, 0) @ image + np.maximum(-patterns, 0) @ image) / photons
    approximation = basis.scales() == 0
    np.testing.assert_allclose(variance[approximation], camera[approximation], rtol=1e-10)
    approximation_image = basis.synthesize(np.where(approximation, values, 0.0))
    light = np.abs(patterns) @ approximation_image  # every pattern: the light of the approximation image
    np.testing.assert_allclose(variance, np.maximum(light, 0.1 * light.mean()) / photons, rtol=1e-10)
    assert "noise_var" in est.learn and est.n_iter_ > 1  # learning ran, and left the noise as the photons give it
    learned = WaveletTreeSpikeSlab(basis, noise="photon", prediction=prediction).fit(np.eye(basis.d), values)
    assert not np.isclose(learned.noise_var_, est.noise_var_, rtol=0.1)


def test_a_photon_count_needs_the_photon_model_and_a_measured_approximation():
    basis = make_basis("haar", 16, level=2)
    values = basis.analyze(np.linspace(0.2, 1.0, basis.d))
    X = np.eye(basis.d)
    for bad in ({"noise": "constant"}, {"noise": "photon", "noise_var": 1e-3}):
        with pytest.raises(ValueError, match="photons gives the noise"):
            WaveletTreeSpikeSlab(basis, photons=100.0, **bad).fit(X, values)
    details = basis.scales() > 0
    with pytest.raises(ValueError, match="no approximation coefficient"):
        WaveletTreeSpikeSlab(basis, noise="photon", photons=100.0).fit(X[details], values[details])
    with pytest.raises(ValueError, match="photons"):
        WaveletTreeSpikeSlab(basis, noise="photon", photons=-1.0).fit(X, values)


@pytest.mark.parametrize("name, side, level", [("haar", 16, 2), ("db2", 32, 3), ("db4", 16, 4)])
def test_pattern_light_equals_the_dense_sum(name, side, level):
    basis = make_basis(name, side, level=level)
    x = np.random.default_rng(2).random(basis.d)
    np.testing.assert_allclose(basis.pattern_light(x), np.abs(basis.synthesize(np.eye(basis.d))) @ x, atol=1e-12)
