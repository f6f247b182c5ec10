"""The demo's table flags a prediction made from a scoring cost measured below one decode step."""

import types

import pytest

from specref import speedup
from specref.apps import demo


def run(method, target_ms, draft="-", K=0):
    stats = types.SimpleNamespace(ms_per_token=10.0, alpha_hat=0.5, tokens_per_target_call=2.0,
                                  target_ms_per_call=target_ms, draft_ms_per_call=0.1, n_examined=10,
                                  calls_by_drafted=[0] * K + [5])
    return demo.Result(method, draft, K, 0.0, None, [1, 2, 3], stats, verify="token" if K else "-")


@pytest.mark.parametrize("sps_call_ms, flagged", [(9.0, True), (12.0, False)])
def test_predict_and_table_flag_an_sps_call_cheaper_than_a_decode_step(sps_call_ms, flagged):
    ars, sps = run("ArS", 10.0), run("SpS", sps_call_ms, "ngram", 4)
    demo.fill_prediction(sps, ars)
    assert sps.score_noise is flagged and sps.speedup == 1.0
    expected = speedup.walltime_improvement_measured(0.5, 4, 0.01, max(1.0, sps_call_ms / 10.0))
    assert sps.predicted == pytest.approx(float(expected))
    text = demo.table([ars, sps])
    assert ("timing noise" in text) is flagged
    assert text.splitlines()[3].endswith("x*") is flagged
