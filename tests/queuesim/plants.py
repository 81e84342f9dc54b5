"""What the planted bugs of the simulation tests share (the plants themselves stand next to the
tests that prove a check catches them)."""

from __future__ import annotations

from cmq.fsm.commands import Command, Produce, Result
from tests.queuesim.observed import ObservingMachine


class StoresProducesOtherwise(ObservingMachine):
    """Base of a planted bug in an observed machine: a `Produce` is stored as `stored` rewrites
    it, while the observer is shown the command as proposed (so it follows what the client asked
    for and must catch the machine doing otherwise from the results). A replica that stopped
    observing (restored from a snapshot) executes the command as proposed. Put it first among
    the bases, before the observed machine it plants the bug in."""

    def stored(self, cmd: Produce) -> Produce:
        """The command the machine executes in place of ``cmd``."""
        raise NotImplementedError

    def execute(self, cmd: Command) -> Result:
        observer = self.observer
        if observer is None or not isinstance(cmd, Produce):
            return super().execute(cmd)
        self.observer = None
        try:
            res = super().execute(self.stored(cmd))
        finally:
            self.observer = observer
        observer.after(self, cmd, res, {})
        return res
