"""GSS-EP with a hidden Markov tree over the groups (``parents=``), kept exact inside EP.

Ground truths: a brute-force dense EP (reference_ep.reference_tree_ep: every marginal of q(z) by enumerating all
states of the groups, no sum-product), the exact posterior of WaveletTreeSpikeSlab on basis scans (itself tested
against enumeration with dense Gaussians), the per-scale prior when the tree carries no dependence, finite
differences of the re-converged evidence, and exact EM on a scan for the learned values.
"""

import warnings

import numpy as np
import pytest
from scipy.special import logit
from sklearn.exceptions import ConvergenceWarning

from adaptcs.bases.images import make_basis
from adaptcs.models import GroupSpikeSlabEP, SpikeSlabEP, WaveletTreeSpikeSlab
from adaptcs.models import _ep_learning as lrn
from adaptcs.models._hmt import GroupTree, TreePrior, logaddexp
from test_wavelet_tree import small_scan

from reference_ep import reference_tree_ep, tree_log_prior

ALL = ("p0", "v0", "noise_var")
# A small forest of 8 groups of 3: group 0 always on (label 0), groups 1-2 roots (label 1), 3-6 their children
# (label 2), 7 a child of 3 (label 3).
GROUP_PARENT = np.array([-1, -1, -1, 1, 1, 2, 2, 3])
GROUP_LABEL = np.array([0, 1, 1, 2, 2, 2, 2, 3])
P_ON = np.array([0.6, 0.7, 0.5])  # labels 1, 2, 3
P_OFF = np.array([0.5, 0.2, 0.1])  # label 1's is not used (roots only)
V0 = np.array([4.0, 1.5, 0.8, 0.4])


def forest_problem(rng, n=14, size=3, noise_var=0.2):
    """Coefficients of the forest above: groups, scale labels, parent coefficients, X, y."""
    G = GROUP_PARENT.shape[0]
    groups = np.repeat(np.arange(G), size)
    scales = GROUP_LABEL[groups]
    first = np.arange(G) * size  # the parent coefficient of a group: the first coefficient of its parent group
    parents = np.where(GROUP_PARENT[groups] >= 0, first[np.maximum(GROUP_PARENT[groups], 0)], -1)
    X = rng.normal(size=(n, groups.shape[0]))
    w = rng.normal(size=groups.shape[0]) * np.sqrt(V0[scales]) * (rng.random(G) < 0.6)[groups]
    y = X @ w + rng.normal(0.0, np.sqrt(noise_var), n)
    return X, y, groups, scales, parents


def tree_estimator(groups, scales, parents, **kwargs):
    options = {"p0": np.r_[0.5, P_ON], "p0_off": np.r_[0.5, P_OFF], "v0": V0, "noise_var": 0.2, "tol": 1e-11,
               "damping": 0.5, "damping_decay": 1.0,
               "max_iter": 20000} | kwargs
    return GroupSpikeSlabEP(groups, scales=scales, parents=parents, **options)


@pytest.mark.parametrize("spread", [1.0, 300.0])
def test_sum_product_against_enumeration(spread):
    """Marginals, pairwise marginals and the log partition function of the forest with random potentials (of
    either sign and hundreds of nats apart with ``spread`` 300, as a scan with little noise gives)."""
    rng = np.random.default_rng(0)
    G = GROUP_PARENT.shape[0]
    group_class = GROUP_LABEL - 1
    prior = TreePrior(GroupTree.from_parents(GROUP_PARENT), group_class)
    level = np.concatenate([logit(P_ON), logit(P_OFF)])
    log_phi = spread * rng.normal(size=(G, 2))
    marginals = prior.marginals(level, log_phi)
    states, log_prior = tree_log_prior(GROUP_PARENT, group_class, P_ON, P_OFF)
    log_w = log_prior + np.where(states == 1, log_phi[:, 1], log_phi[:, 0]).sum(axis=1)
    log_z = np.logaddexp.reduce(log_w)
    weight = np.exp(log_w - log_z)
    assert marginals.log_z == pytest.approx(log_z, rel=1e-13, abs=1e-12)
    np.testing.assert_allclose(marginals.prob, weight @ states, atol=1e-12)
    # the log marginals themselves, also of states hundreds of nats improbable (EP reads them as log-odds)
    for g in range(1, G):  # group 0 is always on: log q(z_0 = 0) = -inf
        for b in (0, 1):
            expected = np.logaddexp.reduce(log_w[states[:, g] == b]) - log_z
            assert marginals.log_post[g, b] == pytest.approx(expected, rel=1e-10, abs=1e-10)
    assert marginals.log_post[0, 0] == -np.inf
    for g in np.flatnonzero(GROUP_PARENT >= 0):
        for a in (0, 1):
            for b in (0, 1):
                expected = weight @ ((states[:, GROUP_PARENT[g]] == a) & (states[:, g] == b))
                assert marginals.pair[g, a, b] == pytest.approx(expected, abs=1e-12)


def test_fast_logaddexp_equals_numpys():
    rng = np.random.default_rng(1)
    a = np.concatenate([rng.normal(size=200) * 10.0 ** rng.integers(-3, 4, 200), [-np.inf, -np.inf, 3.0, 0.0, -800.0]])
    b = np.concatenate([rng.normal(size=200) * 10.0 ** rng.integers(-3, 4, 200), [-np.inf, 2.0, -np.inf, 0.0, -801.0]])
    np.testing.assert_allclose(logaddexp(a, b), np.logaddexp(a, b), rtol=1e-15, atol=5e-18)
    assert logaddexp(np.array([-np.inf]), np.array([-np.inf]))[0] == -np.inf
    assert np.isnan(logaddexp(np.array([np.nan, 1.0]), np.array([0.0, np.nan]))).all()  # a NaN is not hidden


def test_group_tree_checks_its_input():
    with pytest.raises(ValueError, match="cycle"):
        GroupTree.from_parents([1, 2, 0])
    with pytest.raises(ValueError, match="another group"):
        GroupTree.from_parents([0, -1])
    with pytest.raises(ValueError, match="different groups"):
        GroupTree.of_coefficients(np.array([0, 0, 1, 1, 2, 2]), np.array([-1, -1, 0, 0, 0, 2]))


def test_wavelet_parents_make_groups_of_siblings():
    """Every detail group of a wavelet basis is the four children of one parent coefficient, one level coarser, of
    the same orientation."""
    basis = make_basis("haar", 16)
    parents, groups, scales = basis.parents(), basis.groups(), basis.scales()
    assert np.all(parents[scales <= 1] == -1) and np.all(parents[scales > 1] >= 0)
    np.testing.assert_array_equal(scales[parents[scales > 1]], scales[scales > 1] - 1)
    for g in np.unique(groups[scales > 1]):
        members = np.flatnonzero(groups == g)
        assert members.size == 4 and np.unique(parents[members]).size == 1
    # a parent's support covers its children's: the child pattern is orthogonal to the parent's complement
    child = np.flatnonzero(scales == 2)[5]
    parent_image = basis.synthesize(np.eye(basis.d)[parents[child]]).reshape(16, 16)
    child_image = basis.synthesize(np.eye(basis.d)[child]).reshape(16, 16)
    assert np.all(parent_image[child_image != 0] != 0)


@pytest.mark.parametrize("seed", range(3))
def test_fixed_point_equals_brute_force_tree_ep(seed):
    """Random rows: the same fixed point (mean, group probabilities, evidence) as the dense EP whose q(z) marginals
    are enumerated over every state of the groups."""
    rng = np.random.default_rng(seed)
    X, y, groups, scales, parents = forest_problem(rng)
    est = tree_estimator(groups, scales, parents).fit(X, y)
    assert est.converged_
    mean, group_prob, log_evidence = reference_tree_ep(X, y, groups, GROUP_PARENT, GROUP_LABEL - 1, P_ON, P_OFF,
                                                       V0[scales], 0.2, v_inf=300.0 * V0[scales])
    np.testing.assert_allclose(est.coef_, mean, atol=1e-7)
    np.testing.assert_allclose(est.group_prob_, group_prob, atol=1e-7)
    assert est.log_evidence_ == pytest.approx(log_evidence, abs=1e-7)
    np.testing.assert_array_equal(est.p0_, np.r_[1.0, P_ON])
    np.testing.assert_array_equal(est.p0_off_, np.r_[1.0, P_OFF])


@pytest.mark.parametrize("seed", range(3))
def test_a_tree_without_dependence_is_the_per_scale_prior(seed):
    """p0_off = p0: the tree's states are independent, and the fit is that of the per-scale prior."""
    rng = np.random.default_rng(seed)
    X, y, groups, scales, parents = forest_problem(rng)
    p0 = np.r_[0.5, P_ON]
    tree = tree_estimator(groups, scales, parents, p0=p0, p0_off=p0).fit(X, y)
    plain = GroupSpikeSlabEP(groups, scales=scales, p0=p0, v0=V0, noise_var=0.2, tol=1e-11, max_iter=20000, damping=0.5,
                             damping_decay=1.0).fit(X, y)
    np.testing.assert_allclose(tree.coef_, plain.coef_, atol=1e-10)
    np.testing.assert_allclose(tree.coef_var_, plain.coef_var_, rtol=1e-9)
    np.testing.assert_allclose(tree.group_prob_, plain.group_prob_, atol=1e-10)
    assert tree.log_evidence_ == pytest.approx(plain.log_evidence_, abs=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_exact_on_a_basis_scan(seed):
    """Rows that each measure one coefficient: EP with the tree is exact, so it equals WaveletTreeSpikeSlab's exact
    posterior (means, group probabilities, evidence; variances wherever the site is not clamped)."""
    basis, X, y = small_scan(seed, repeat=False)
    p_on, p_off, v0, s2 = np.array([0.7, 0.6]), np.array([0.3, 0.1]), np.array([3.0, 1.0, 0.2]), 0.09
    exact = WaveletTreeSpikeSlab(basis, states="groups", p_on=p_on, p_off=p_off, v0=v0, noise_var=s2,
                                 learn=()).fit(X, y)
    ep = GroupSpikeSlabEP(basis.groups(), scales=basis.scales(), parents=basis.parents(), p0=np.r_[0.5, p_on],
                          p0_off=np.r_[0.5, p_off], v0=v0, noise_var=s2, tol=1e-12, max_iter=5000).fit(X, y)
    assert ep.converged_
    np.testing.assert_allclose(ep.coef_, exact.coef_, atol=1e-10)
    np.testing.assert_allclose(ep.group_prob_, exact.group_prob_, atol=1e-10)
    assert ep.log_evidence_ == pytest.approx(exact.log_evidence_, abs=1e-9)
    # a clamped site (the tilted variance exceeds the cavity's) keeps EP's Gaussian from matching the mixture
    clamped = ep.sites_.var >= 0.99 * 300.0 * v0[basis.scales()]
    assert np.count_nonzero(~clamped) > 0.9 * basis.d
    np.testing.assert_allclose(ep.coef_var_[~clamped], exact.coef_var_[~clamped], rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("seed", range(2))
def test_ss_ep_with_the_coefficients_tree_is_exact_on_a_basis_scan(seed):
    """SpikeSlabEP with ``parents=basis.parents()`` (a state per coefficient) equals WaveletTreeSpikeSlab with
    ``states="coefficients"`` on a scan (means, inclusion probabilities, evidence)."""
    basis, X, y = small_scan(seed, repeat=False)
    p_on, p_off, v0, s2 = np.array([0.7, 0.6]), np.array([0.3, 0.1]), np.array([3.0, 1.0, 0.2]), 0.09
    exact = WaveletTreeSpikeSlab(basis, states="coefficients", p_on=p_on, p_off=p_off, v0=v0, noise_var=s2,
                                 learn=()).fit(X, y)
    ep = SpikeSlabEP(scales=basis.scales(), parents=basis.parents(), p0=np.r_[0.5, p_on], p0_off=np.r_[0.5, p_off],
                     v0=v0, noise_var=s2, tol=1e-12, max_iter=5000).fit(X, y)
    assert ep.converged_
    np.testing.assert_allclose(ep.coef_, exact.coef_, atol=1e-10)
    np.testing.assert_allclose(ep.group_prob_, exact.group_prob_, atol=1e-10)
    assert ep.log_evidence_ == pytest.approx(exact.log_evidence_, abs=1e-9)


def test_ungrouped_tree_on_a_scan_equals_the_tree_of_coefficients():
    """SpikeSlabEP with parents: every coefficient a group, the tree the coefficients' own (brute force)."""
    rng = np.random.default_rng(4)
    scales = np.array([0, 1, 1, 2, 2, 2, 2])
    parents = np.array([-1, -1, -1, 1, 1, 2, 2])
    X = rng.normal(size=(5, 7))
    y = X @ (rng.normal(size=7) * (rng.random(7) < 0.6)) + rng.normal(0, 0.3, 5)
    p_on, p_off, v0 = np.array([0.6, 0.7]), np.array([0.5, 0.2]), np.array([3.0, 1.0, 0.5])
    est = SpikeSlabEP(scales=scales, parents=parents, p0=np.r_[0.5, p_on], p0_off=np.r_[0.5, p_off], v0=v0,
                      noise_var=0.09, tol=1e-12, max_iter=20000).fit(X, y)
    mean, prob, log_ev = reference_tree_ep(X, y, np.arange(7), parents, scales - 1, p_on, p_off, v0[scales], 0.09,
                                           v_inf=300.0 * v0[scales])
    np.testing.assert_allclose(est.coef_, mean, atol=1e-7)
    np.testing.assert_allclose(est.group_prob_, prob, atol=1e-7)
    assert est.log_evidence_ == pytest.approx(log_ev, abs=1e-7)


def test_evidence_gradient_in_the_transitions_matches_finite_differences():
    """The gradient in (logit p_on, logit p_off per class, log v0, log s2) is the total derivative of the
    re-converged EP evidence at a fixed point without clamped sites."""
    checked = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        X, y, groups, scales, parents = forest_problem(rng, n=30)
        est = tree_estimator(groups, scales, parents, learn=())
        est.fit(X, y)
        problem, hyper = _problem_of(est, X, y)
        run = problem.run(hyper, tol=1e-12, max_iter=20000)
        if not run.converged or np.any(run.sites.var >= 0.99 * problem.v_inf_ratio * problem.slab_var(hyper)):
            continue
        checked += 1
        grad = lrn.evidence_gradient(problem, hyper, run)
        assert grad.shape == (6 + 4 + 1,)
        h = 1e-5
        for k in [0, 1, 2, 4, 5, 7, 10]:  # logit p_off of class 0 (roots only) has no effect: its gradient is 0
            values = []
            for sign in (1.0, -1.0):
                phi = hyper.phi()
                phi[k] += sign * h
                values.append(problem.run(lrn.Hyper.from_phi(phi, problem.n_levels), run.sites, tol=1e-13,
                                          max_iter=20000).log_evidence)
            fd = (values[0] - values[1]) / (2 * h)
            assert grad[k] == pytest.approx(fd, rel=1e-5, abs=1e-6), (k, grad[k], fd)
        assert grad[3] == 0.0
        if checked == 2:
            break
    assert checked == 2


def _problem_of(est, X, y):
    """The EPProblem and Hyper a fit of ``est`` runs on (unit data: these tests' data are of unit size already)."""
    from adaptcs.models import _ep_prior as ep_prior
    from adaptcs.models._ep import EPProblem, Hyper

    labels, coef_group = np.unique(est.groups, return_inverse=True)
    prior = ep_prior.prior_classes(est.p0, est.v0, coef_group, labels.shape[0], scales=est.scales,
                                   parents=est.parents, p0_off=est.p0_off)
    problem = EPProblem(X, y, coef_group, prior.offsets, coef_slab=prior.coef_slab, slab_profile=prior.slab_profile,
                        tree=prior.tree, v_inf_ratio=300.0, damping=0.5, damping_decay=1.0)
    return problem, Hyper(prior.level, prior.v0, est.noise_var)


@pytest.mark.parametrize("seed", [1, 2, 3, 5])
def test_learned_tree_on_a_scan_matches_exact_em(seed):
    """Type-II ML of the transitions, slab variances and noise on a scan: from the same start, EP's learning ends
    where exact EM (WaveletTreeSpikeSlab, one v0 per scale) does, up to the bounds on the probabilities."""
    basis, X, y = small_scan(seed, repeat=False)
    exact = WaveletTreeSpikeSlab(basis, states="groups", scale_profile="free", tol=1e-10, max_iter=5000).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ep = GroupSpikeSlabEP(basis.groups(), scales=basis.scales(), parents=basis.parents(), p0=[0.5, 0.7, 0.7],
                              p0_off=[0.5, 0.1, 0.1], v0=exact.v0_, noise_var=exact.noise_var_, learn=ALL, tol=1e-10,
                              max_iter=5000).fit(X, y)
    assert exact.converged_
    assert ep.log_evidence_ == pytest.approx(exact.log_evidence_, abs=0.01)
    assert ep.noise_var_ == pytest.approx(exact.noise_var_, rel=0.05)
    np.testing.assert_allclose(ep.v0_, exact.v0_, rtol=0.05)
    np.testing.assert_allclose(ep.p0_[1:], exact.p_on_, atol=0.03)


def test_learned_tree_finds_the_dependence_it_was_drawn_from():
    """Data drawn from a tree with strong dependence (children of an off parent almost always off), measured by
    random rows: the learned p0_off is far below p0 at the finer scales, the evidence beats the per-scale prior's,
    and the reconstruction is no worse."""
    rng = np.random.default_rng(0)
    basis = make_basis("haar", 16)
    groups, scales, parents = basis.groups(), basis.scales(), basis.parents()
    tree = GroupTree.of_coefficients(np.unique(groups, return_inverse=True)[1], parents)
    labels = np.unique(groups)
    group_scale = np.zeros(labels.shape[0], dtype=int)
    group_scale[np.searchsorted(labels, groups)] = scales
    z = np.ones(labels.shape[0], dtype=bool)
    for depth in tree.depths:
        for g in depth:
            if group_scale[g] == 0:
                continue
            parent_on = tree.parent[g] < 0 or z[tree.parent[g]]
            z[g] = rng.random() < (0.6 if parent_on else 0.02)
    v0 = np.array([4.0, 1.0, 0.25])[scales]
    c = rng.normal(size=basis.d) * np.sqrt(v0) * z[np.searchsorted(labels, groups)]
    X = rng.normal(size=(150, basis.d))
    y = X @ c + rng.normal(0.0, 0.1, 150)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = GroupSpikeSlabEP(groups, scales=scales, parents=parents, learn=ALL).fit(X, y)
        plain = GroupSpikeSlabEP(groups, scales=scales, learn=ALL).fit(X, y)
    assert fit.p0_off_[2] < 0.5 * fit.p0_[2]
    assert fit.log_evidence_ > plain.log_evidence_
    assert np.linalg.norm(fit.coef_ - c) <= 1.001 * np.linalg.norm(plain.coef_ - c)


@pytest.mark.parametrize("kwargs, message", [
    ({"parents": np.full(6, -1)}, "parents need scales"),
    ({"scales": [0, 0, 1, 1, 1, 1], "p0_off": 0.3}, "p0_off .* needs parents"),
    ({"scales": [0, 0, 1, 1, 1, 1], "parents": [-1, -1, 0, 0, 0, 2]}, "different groups"),
    ({"scales": [0, 0, 1, 1, 1, 1], "parents": [-1, -1, 0, 0, 0]}, "one integer per coefficient"),
    ({"scales": [0, 0, 1, 1, 1, 1], "parents": [-1, -1, 0, 0, 0, 9]}, "coefficient indices"),
    ({"scales": [0, 0, 1, 1, 1, 1], "parents": [-1, -1, 0, 0, 0, 0], "p0_off": [0.2, 0.3, 0.4]}, "p0_off"),
])
def test_bad_trees_are_refused(kwargs, message):
    X = np.random.default_rng(0).normal(size=(5, 6))
    with pytest.raises(ValueError, match=message):
        GroupSpikeSlabEP([0, 0, 1, 1, 2, 2], **kwargs).fit(X, X[:, 0])
