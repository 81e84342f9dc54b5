"""The commands of a data group's state machine, their byte layout and their results: the one
import for code that builds, encodes or answers commands.

`cmq.fsm.commands.definitions` says what each command asks of `QueueMachine.apply` and which
result it is answered with (its ``result_type``); `cmq.fsm.commands.codec` is their byte layout
(`encode_command`, `encode_ack`, `decode_command`); the results themselves live in
`cmq.fsm.results`.
"""

from cmq.fsm import results
from cmq.fsm.commands import codec, definitions, sends
from cmq.fsm.commands.codec import *  # noqa: F403 - each module's names, re-exported
from cmq.fsm.commands.codec import encode_ack
from cmq.fsm.commands.definitions import *  # noqa: F403
from cmq.fsm.commands.sends import *  # noqa: F403
from cmq.fsm.results import *  # noqa: F403
from cmq.model import QueueAttributes  # what queue commands carry; long imported from here

__all__ = ["QueueAttributes", "encode_ack"]
__all__ += codec.__all__
__all__ += definitions.__all__
__all__ += sends.__all__
__all__ += results.__all__
