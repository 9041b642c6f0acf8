"""Running Slurm's client commands: argument lists, timeouts, errors that name the command.

Why never a shell: job names, users and partitions come from whoever submits jobs; passed through
a shell, a job called ``x; rm -rf /`` would be a command. Every call here is an argument list given
to ``subprocess`` directly, every value put into one is validated first (``validate``), and every
failure becomes a ``SlurmCommandError`` whose message names the command, so an operator reading
the log knows which call failed and why, without a traceback.

Why mutating commands are separate (``mutate``): a dry run must still read the real queue but never
change it; the runner logs what it would have run instead.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: Slurm job ids: "1234", an array task "1234_7", a het job component "1234+1"
JOB_ID = re.compile(r"^[1-9][0-9]{0,9}(?:_[0-9]{1,10}|\+[0-9]{1,4})?$")
#: node names as slurm.conf allows them (no hostlist brackets: one node each)
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
#: stderr phrases meaning "the controller cannot be reached" (retry later, not a bad request)
UNREACHABLE = (
    "unable to contact slurm controller",
    "connection refused",
    "socket timed out",
    "communication connection failure",
    "zero bytes were transmitted",
    "slurm_load_jobs error",
    "slurm_load_node",
    "slurm_load_partitions",
)


class SlurmCommandError(RuntimeError):
    """A Slurm command failed or printed something unusable; the message names the command."""

    def __init__(self, command: str, reason: str, *, unreachable: bool = False) -> None:
        super().__init__(f"{command}: {reason}")
        self.command = command
        self.reason = reason
        self.unreachable = unreachable


class SlurmValueError(ValueError):
    """A value meant for a Slurm command failed validation (names the command and the field)."""


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    stdout: str
    stderr: str
    returncode: int

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def validate_job_id(command: str, value: str) -> str:
    """A job id as Slurm prints it; anything else is refused before a command is built."""
    if not JOB_ID.match(value):
        raise SlurmValueError(
            f"{command}: JobId {value!r} is not a Slurm job id (expected e.g. 1234 or 1234_7)"
        )
    return value


def validate_node_name(command: str, value: str) -> str:
    if not NODE_NAME.match(value):
        raise SlurmValueError(f"{command}: node name {value!r} is not a plain Slurm node name")
    return value


def validate_priority(command: str, value: int) -> int:
    # bool is an int in Python; a True priority is a bug, not 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4_294_967_293:
        raise SlurmValueError(f"{command}: Priority {value!r} must be an integer in 1..4294967293")
    return value


class CommandRunner:
    """Runs Slurm client commands with ``SLURM_CONF`` and a timeout; ``dry_run`` skips mutations."""

    def __init__(
        self,
        *,
        slurm_conf: Path | None = None,
        bin_dir: Path | None = None,
        timeout_s: float = 20.0,
        dry_run: bool = False,
    ) -> None:
        self.slurm_conf = slurm_conf
        self.bin_dir = bin_dir
        self.timeout_s = timeout_s
        self.dry_run = dry_run
        #: mutating commands not run because of dry_run, in order (for logs and tests)
        self.would_run: list[tuple[str, ...]] = []

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.slurm_conf is not None:
            env["SLURM_CONF"] = str(self.slurm_conf)
        # epoch seconds in every text output: no local-time parsing, no time zone guess
        env["SLURM_TIME_FORMAT"] = "%s"
        env.pop("SQUEUE_FORMAT", None)
        env.pop("SQUEUE_FORMAT2", None)
        env.pop("SINFO_FORMAT", None)
        env.pop("SACCT_FORMAT", None)
        return env

    def _program(self, name: str) -> str:
        return str(self.bin_dir / name) if self.bin_dir is not None else name

    def run(self, argv: Sequence[str], *, check: bool = True) -> CommandResult:
        """Run a read-only command; raise SlurmCommandError naming it when it fails (``check``)."""
        if not argv or any(not isinstance(a, str) or "\x00" in a for a in argv):
            raise SlurmValueError(f"invalid argument list {list(argv)!r}")
        full = (self._program(argv[0]), *argv[1:])
        shown = shlex.join(argv)
        try:
            proc = subprocess.run(
                full,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.timeout_s,
                env=self._env(),
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise SlurmCommandError(
                shown, f"program {full[0]!r} not found (install slurm-client or set HYLO_SLURM_BIN_DIR)"
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(shown, f"no answer within {self.timeout_s} s", unreachable=True) from None
        except OSError as err:
            raise SlurmCommandError(shown, f"could not start: {err}") from None
        result = CommandResult(tuple(argv), proc.stdout, proc.stderr, proc.returncode)
        if check and proc.returncode != 0:
            raise self.error(result)
        return result

    def mutate(self, argv: Sequence[str]) -> CommandResult | None:
        """Run a command that changes Slurm, or only log it in dry-run mode (returns None then)."""
        if self.dry_run:
            self.would_run.append(tuple(argv))
            log.info("dry run: would run %s", shlex.join(argv))
            return None
        return self.run(argv, check=False)

    @staticmethod
    def error(result: CommandResult) -> SlurmCommandError:
        stderr = " ".join(result.stderr.split())[:500] or "(no message)"
        unreachable = any(p in stderr.lower() for p in UNREACHABLE)
        return SlurmCommandError(
            result.command, f"exit status {result.returncode}: {stderr}", unreachable=unreachable
        )
