"""A deliberately plain, dense re-derivation of group spike-and-slab EP, used only as a test oracle.

It shares no code with the engine and takes a different route at every step: the posterior by a dense
d x d inverse, the group cavity by an explicit loop over the other members of the group, the tilted
moments from the closed-form two-component mixture (no derivative formulas), constant damping, and the
evidence as ``log N(y | X mt, s2 I + X diag(vt) X^T)`` plus the per-site normalisers (no Sylvester
identity). Its fixed point must equal the engine's.
"""

import numpy as np
from scipy.special import expit, logit


def _normal_pdf(x, mean, var):
    return np.exp(-0.5 * (x - mean) ** 2 / var) / np.sqrt(2 * np.pi * var)


def _log_normal_pdf(x, mean, var):
    return -0.5 * (x - mean) ** 2 / var - 0.5 * np.log(2 * np.pi * var)


def reference_ep(X, y, groups, p0, v0, s2, v_inf=100.0, n_iter=4000, damping=0.5, sites=None):
    """Returns (mean, group_prob, log_evidence) at the EP fixed point; groups are 0..G-1, p0 has shape (G,).
    ``sites=(vt, mt, pt)`` starts there instead of at the prior (``n_iter=1, damping=1``: one undamped update)."""
    n, d = X.shape
    G = groups.max() + 1
    vt, mt, pt = (p0[groups] * v0, np.zeros(d), np.zeros(d)) if sites is None else map(np.array, sites)
    for _ in range(n_iter):
        V = np.linalg.inv(X.T @ X / s2 + np.diag(1 / vt))
        m = V @ (X.T @ y / s2 + mt / vt)
        Vjj = np.diag(V)
        pc = np.array([logit(p0[g]) + sum(pt[k] for k in range(d) if groups[k] == g and k != j)
                       for j, g in enumerate(groups)])
        vc = 1 / (1 / Vjj - 1 / vt)
        mc = vc * (m / Vjj - mt / vt)
        valid = vc > 0
        vc_ = np.where(valid, vc, 1.0)
        w_slab = expit(pc) * _normal_pdf(0, mc, vc_ + v0)
        w_spike = expit(-pc) * _normal_pdf(0, mc, vc_)
        r1 = w_slab / (w_slab + w_spike)
        slab_mean, slab_var = mc * v0 / (vc_ + v0), vc_ * v0 / (vc_ + v0)
        tilted_mean = r1 * slab_mean
        tilted_var = r1 * (slab_var + slab_mean**2) - tilted_mean**2
        prec = 1 / tilted_var - 1 / vc_
        new_vt = np.where(prec > 0, 1 / np.where(prec > 0, prec, 1.0), v_inf)
        new_mt = tilted_mean + new_vt * (tilted_mean - mc) / vc_
        # tilted log-odds of z minus the cavity's (= logit(r1) - pc, without its overflow at r1 -> 0 or 1)
        new_pt = _log_normal_pdf(0, mc, vc_ + v0) - _log_normal_pdf(0, mc, vc_)
        lam = np.where(valid, damping / new_vt + (1 - damping) / vt, 1 / vt)
        eta = np.where(valid, damping * new_mt / new_vt + (1 - damping) * mt / vt, mt / vt)
        pt = np.where(valid, damping * new_pt + (1 - damping) * pt, pt)
        vt, mt = 1 / lam, eta / lam

    V = np.linalg.inv(X.T @ X / s2 + np.diag(1 / vt))
    m = V @ (X.T @ y / s2 + mt / vt)
    Vjj = np.diag(V)
    group_logit = logit(p0) + np.array([pt[groups == g].sum() for g in range(G)])
    pc = group_logit[groups] - pt
    vc = 1 / (1 / Vjj - 1 / vt)
    mc = vc * (m / Vjj - mt / vt)
    log_kappa = np.logaddexp(np.log(expit(pc)) + _log_normal_pdf(0, mc, vc + v0),
                             np.log(expit(-pc)) + _log_normal_pdf(0, mc, vc))
    log_site_norm = _log_normal_pdf(mc, mt, vc + vt) + np.log(expit(pc) * expit(pt) + expit(-pc) * expit(-pt))
    cov_y = s2 * np.eye(n) + X @ np.diag(vt) @ X.T
    resid = y - X @ mt
    log_gauss = -0.5 * (n * np.log(2 * np.pi) + np.linalg.slogdet(cov_y)[1] + resid @ np.linalg.solve(cov_y, resid))
    log_bern = sum(np.log(p0[g] * np.prod(expit(pt[groups == g])) + (1 - p0[g]) * np.prod(expit(-pt[groups == g])))
                   for g in range(G))
    log_evidence = log_gauss + log_bern + np.sum(log_kappa - log_site_norm)
    return m, expit(group_logit), log_evidence


def tree_log_prior(parent, group_class, p_on, p_off):
    """Every state of the groups (the always-on ones, class -1, fixed at 1) and its log prior probability under the
    hidden Markov tree, written out group by group. Returns (states (S, G) of 0/1, log_prior (S,))."""
    G = parent.shape[0]
    free = np.flatnonzero(group_class >= 0)
    states = np.ones((2 ** free.size, G), dtype=int)
    for i, bits in enumerate(np.ndindex(*(2,) * free.size)):
        states[i, free] = bits
    log_prior = np.zeros(states.shape[0])
    for i, z in enumerate(states):
        for g in free:
            parent_on = parent[g] < 0 or z[parent[g]] == 1
            p = (p_on if parent_on else p_off)[group_class[g]]
            log_prior[i] += np.log(p if z[g] else 1 - p)
    return states, log_prior


def reference_tree_ep(X, y, groups, parent, group_class, p_on, p_off, v0, s2, v_inf=100.0, n_iter=4000,
                      damping=0.5):
    """EP with the groups' states a hidden Markov tree kept exact, by brute force: every marginal of q(z) (and every
    cavity's, leaving one site out) by enumerating all states of the groups. Slab variances ``v0`` per coefficient.
    Returns (mean, group_prob, log_evidence) at the fixed point."""
    with np.errstate(divide="ignore"):  # always-on groups: log-odds +inf
        return _reference_tree_ep(X, y, groups, parent, group_class, p_on, p_off, v0, s2, v_inf, n_iter, damping)


def _reference_tree_ep(X, y, groups, parent, group_class, p_on, p_off, v0, s2, v_inf, n_iter, damping):
    n, d = X.shape
    states, log_prior = tree_log_prior(parent, group_class, p_on, p_off)
    member = states[:, groups]  # (S, d): z of each coefficient's group in each state

    def log_weights(pt, leave_out=None):
        terms = np.where(member == 1, np.log(expit(pt)), np.log(expit(-pt)))
        if leave_out is not None:
            terms[:, leave_out] = 0.0
        return log_prior + terms.sum(axis=1)

    def log_odds_on(log_w, g):
        on = states[:, g] == 1
        return np.logaddexp.reduce(log_w[on]) - np.logaddexp.reduce(log_w[~on])  # +inf for an always-on group

    vt, mt, pt = v0 * 0.5, np.zeros(d), np.zeros(d)
    for _ in range(n_iter):
        V = np.linalg.inv(X.T @ X / s2 + np.diag(1 / vt))
        m = V @ (X.T @ y / s2 + mt / vt)
        Vjj = np.diag(V)
        pc = np.array([log_odds_on(log_weights(pt, j), groups[j]) for j in range(d)])
        vc = 1 / (1 / Vjj - 1 / vt)
        mc = vc * (m / Vjj - mt / vt)
        valid = vc > 0
        vc_ = np.where(valid, vc, 1.0)
        w_slab = expit(pc) * _normal_pdf(0, mc, vc_ + v0)
        w_spike = expit(-pc) * _normal_pdf(0, mc, vc_)
        r1 = w_slab / (w_slab + w_spike)
        slab_mean, slab_var = mc * v0 / (vc_ + v0), vc_ * v0 / (vc_ + v0)
        tilted_mean = r1 * slab_mean
        tilted_var = r1 * (slab_var + slab_mean**2) - tilted_mean**2
        prec = 1 / tilted_var - 1 / vc_
        new_vt = np.where(prec > 0, 1 / np.where(prec > 0, prec, 1.0), v_inf)
        new_mt = tilted_mean + new_vt * (tilted_mean - mc) / vc_
        new_pt = _log_normal_pdf(0, mc, vc_ + v0) - _log_normal_pdf(0, mc, vc_)
        lam = np.where(valid, damping / new_vt + (1 - damping) / vt, 1 / vt)
        eta = np.where(valid, damping * new_mt / new_vt + (1 - damping) * mt / vt, mt / vt)
        pt = np.where(valid, damping * new_pt + (1 - damping) * pt, pt)
        vt, mt = 1 / lam, eta / lam

    V = np.linalg.inv(X.T @ X / s2 + np.diag(1 / vt))
    m = V @ (X.T @ y / s2 + mt / vt)
    Vjj = np.diag(V)
    log_w = log_weights(pt)
    group_prob = expit(np.array([log_odds_on(log_w, g) for g in range(parent.shape[0])]))
    pc = np.array([log_odds_on(log_weights(pt, j), groups[j]) for j in range(d)])
    vc = 1 / (1 / Vjj - 1 / vt)
    mc = vc * (m / Vjj - mt / vt)
    log_kappa = np.logaddexp(np.log(expit(pc)) + _log_normal_pdf(0, mc, vc + v0),
                             np.log(expit(-pc)) + _log_normal_pdf(0, mc, vc))
    log_site_norm = _log_normal_pdf(mc, mt, vc + vt) + np.log(expit(pc) * expit(pt) + expit(-pc) * expit(-pt))
    cov_y = s2 * np.eye(n) + X @ np.diag(vt) @ X.T
    resid = y - X @ mt
    log_gauss = -0.5 * (n * np.log(2 * np.pi) + np.linalg.slogdet(cov_y)[1] + resid @ np.linalg.solve(cov_y, resid))
    log_partition = np.logaddexp.reduce(log_w)
    log_evidence = log_gauss + log_partition + np.sum(log_kappa - log_site_norm)
    return m, group_prob, log_evidence
