import gc

import pytest


@pytest.fixture(autouse=True)
def _frozen_heap():
    """Every out-of-memory trial ends with a full garbage collection (tuner/batch_size_scaling.py's
    free_memory), which in this test process walks every object the suite has made so far: about 0.2 s each in
    a lone test, several times that late in the full suite, a dozen per search. Objects alive before the test
    are moved out of the collector's sight for its duration (``gc.freeze``); what the trials make is collected
    as before."""
    gc.freeze()
    yield
    gc.unfreeze()
