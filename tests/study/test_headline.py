"""The headline β: a rule on the β sweep's controls alone, fixed before S is looked at."""

import numpy as np
import pytest

from vheads.study import config_from_dict
from vheads.study._headline import controls_rule, parse_beta_rule


def test_the_controls_rule_takes_the_largest_beta_whose_controls_stay_unmoved():
    rng = np.random.default_rng(0)
    sweep = {1.0: rng.normal(0, 0.01, 40), 10.0: rng.normal(0, 0.03, 40), 100.0: rng.normal(0.1, 0.2, 40),
             1e4: rng.normal(0.0, 0.3, 40)}
    rms = {b: float(np.sqrt(np.mean(v ** 2))) for b, v in sweep.items()}  # by hand
    beta, got, met = controls_rule(sweep, 0.05)
    assert got == pytest.approx(rms)
    assert met and beta == max(b for b in sweep if rms[b] <= 0.05) == 10.0
    # a tighter tolerance that nothing meets: the β of smallest RMS, and the record says so
    beta, _, met = controls_rule(sweep, 1e-4)
    assert not met and beta == min(rms, key=rms.get)


def test_the_rule_never_reads_s():
    """Only the controls enter: the same controls give the same β whatever S would do."""
    sweep = {1.0: np.array([0.01, -0.02]), 10.0: np.array([0.2, -0.3])}
    assert controls_rule(sweep, 0.05)[0] == 1.0


@pytest.mark.parametrize("rule, parsed", [("fixed", ("fixed", None)), ("controls", ("controls", 0.05)),
                                          ("controls:0.1", ("controls", 0.1))])
def test_beta_rules_parse(rule, parsed):
    assert parse_beta_rule(rule) == parsed


@pytest.mark.parametrize("rule", ["auto", "controls:2", "controls:x", "fixed:1"])
def test_a_bad_beta_rule_is_refused_naming_the_key(rule):
    with pytest.raises(ValueError, match="beta_rule"):
        config_from_dict({"beta_rule": rule})
