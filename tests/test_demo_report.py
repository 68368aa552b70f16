"""The demo's results table: its columns say what they hold."""

from zipccl.demo import report


def test_table_final_loss_is_the_mean_of_the_last_10_steps():
    # the last step alone (1.1) and the mean of the last ten (2.0) differ
    losses = [9.0] * 5 + [2.1] * 9 + [1.1]
    runs = {"gloo": {"tp": {"losses": losses, "median_step_s": 1.0, "nic_per_step": 1e6}}}
    text = report.table(runs, {"gloo": "gloo"}, ["tp"])
    assert text.splitlines()[1].split()[-1] == f"{report._final(losses):.4f}" == "2.0000"
