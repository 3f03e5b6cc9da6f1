"""The embedded redis-server: start-up, ownership of its data directory, durability and shutdown."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import dataq
from dataq.embedded import redis_server
from dataq.embedded.redis_server import LOCK_FILE, EmbeddedRedis, find_running, free_port
from dataq.errors import EmbeddedRedisError
from tests.conftest import MakeRedis

REPO_ROOT = Path(dataq.__file__).resolve().parent.parent
CHILD_STOP_TIMEOUT = 15.0

# Owns an embedded server from another process; SIGTERM makes it leave the `with`, stopping the server.
OWNER_PROCESS = """
import signal, sys, time
from dataq.embedded.redis_server import EmbeddedRedis
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
with EmbeddedRedis(sys.argv[1], port=0) as server:
    print(server.url, server.pid, flush=True)
    time.sleep(600)
"""


@contextlib.contextmanager
def connect(url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


def config(url: str, name: str) -> str:
    with connect(url) as client:
        return str(client.config_get(name)[name])


@contextlib.contextmanager
def foreign_owner(data_dir: Path) -> Iterator[tuple[subprocess.Popen[str], str, int]]:
    """An embedded server owned by a child Python process: (that process, the server's url, its pid)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    with subprocess.Popen(
        [sys.executable, "-c", OWNER_PROCESS, str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as owner:
        assert owner.stdout is not None and owner.stderr is not None
        line = owner.stdout.readline().split()
        redis_pid = int(line[1]) if len(line) == 2 else None
        try:
            assert redis_pid is not None, (
                f"the owner process failed: {owner.stderr.read() if owner.poll() is not None else ''}"
            )
            yield owner, line[0], redis_pid
        finally:
            with contextlib.suppress(ProcessLookupError):
                owner.send_signal(signal.SIGTERM)
            try:
                owner.wait(CHILD_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(owner.pid, signal.SIGKILL)
                owner.wait()
            # The server runs in its own session, so the group kill above cannot reach it.
            if redis_pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(redis_pid, signal.SIGKILL)


def lock_is_free(data_dir: Path) -> bool:
    fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


# --- starting ------------------------------------------------------------------------------------------------


def test_starts_on_a_free_loopback_port_with_aof_and_no_snapshots(make_redis: MakeRedis) -> None:
    server = make_redis(port=0)
    assert server.url.startswith("redis://127.0.0.1:")
    assert server.is_running() and server.pid is not None
    with connect(server.url) as client:
        assert client.ping()
        assert client.info("server")["process_id"] == server.pid
    assert config(server.url, "appendonly") == "yes"
    assert config(server.url, "appendfsync") == "always"
    assert config(server.url, "save") == ""
    assert config(server.url, "bind") == "127.0.0.1"
    assert config(server.url, "protected-mode") == "yes"
    assert config(server.url, "dir") == str(server.data_dir)


def test_a_fixed_port_is_used_as_given(make_redis: MakeRedis) -> None:
    port = free_port()
    server = make_redis(port=port, appendfsync="everysec")
    assert server.url == f"redis://127.0.0.1:{port}"
    assert config(server.url, "appendfsync") == "everysec"


def test_unix_socket_mode_listens_only_on_a_private_socket(make_redis: MakeRedis) -> None:
    server = make_redis(port=None)
    socket_path = server.data_dir / "redis.sock"
    assert server.url == f"unix://{socket_path}"
    with connect(server.url) as client:
        assert client.ping()
    assert config(server.url, "port") == "0"
    assert stat.S_IMODE(socket_path.stat().st_mode) == 0o700


def test_the_data_directory_is_created_private(make_redis: MakeRedis, tmp_path: Path) -> None:
    server = make_redis(data_dir=tmp_path / "new" / "data")
    assert stat.S_IMODE(server.data_dir.stat().st_mode) == 0o700
    assert (server.data_dir / "redis.log").is_file()


def test_the_url_of_a_port_zero_server_is_known_only_after_start(make_redis: MakeRedis) -> None:
    server = make_redis(start=False)
    with pytest.raises(EmbeddedRedisError, match="only after start"):
        _ = server.url
    server.start()
    assert server.url.startswith("redis://127.0.0.1:")


def test_port_zero_tries_another_port_when_the_chosen_one_is_taken(
    make_redis: MakeRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        chosen: list[int] = []
        real_free_port = redis_server.free_port

        def squatted_first() -> int:
            chosen.append(real_free_port() if chosen else taken)
            return chosen[-1]

        monkeypatch.setattr(redis_server, "free_port", squatted_first)
        server = make_redis(port=0)
        assert len(chosen) == 2
        assert server.url == f"redis://127.0.0.1:{chosen[1]}"
        with connect(server.url) as client:
            assert client.ping()


def test_the_lock_file_names_the_server_pid_and_url(make_redis: MakeRedis) -> None:
    server = make_redis()
    lines = (server.data_dir / LOCK_FILE).read_text().splitlines()
    assert f"pid={server.pid}" in lines
    assert f"owner={os.getpid()}" in lines
    assert f"url={server.url}" in lines


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "data", port=0) as server, connect(server.url) as client:
        assert client.ping()
    assert not server.is_running()
    assert lock_is_free(tmp_path / "data")


# --- refusals ------------------------------------------------------------------------------------------------


def test_refuses_a_data_directory_already_in_use(make_redis: MakeRedis) -> None:
    first = make_redis()
    second = EmbeddedRedis(first.data_dir, port=0)
    with pytest.raises(
        EmbeddedRedisError,
        match=rf"data directory {first.data_dir} is already used by a running dataq redis-server \(pid {first.pid}\)",
    ):
        second.start()
    assert not second.is_running()
    with connect(first.url) as client:
        assert client.ping()


def test_missing_redis_server_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    server = EmbeddedRedis(tmp_path / "data")
    with pytest.raises(EmbeddedRedisError) as raised:
        server.start()
    assert str(raised.value) == (
        "redis-server not found on PATH; install it with `apt-get install redis-server` (Debian/Ubuntu)"
        " or set [redis] url to an existing server"
    )
    assert not (tmp_path / "data").exists()


def test_a_missing_explicit_executable_is_named(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "data", executable="/nonexistent/redis-server")
    with pytest.raises(EmbeddedRedisError, match="'/nonexistent/redis-server' not found; install it with"):
        server.start()


def test_a_socket_path_too_long_is_refused(tmp_path: Path) -> None:
    room = 107 - len(os.fsencode(tmp_path / "redis.sock")) - 1
    EmbeddedRedis(tmp_path / ("d" * room))  # exactly 107 bytes: accepted
    with pytest.raises(EmbeddedRedisError, match="108 bytes, longer than the 107 bytes Linux allows"):
        EmbeddedRedis(tmp_path / ("d" * (room + 1)))
    EmbeddedRedis(tmp_path / ("d" * 200), port=0)  # TCP mode has no socket path


@pytest.mark.parametrize("appendfsync", ["sometimes", "ALWAYS", ""])
def test_a_wrong_appendfsync_is_refused(tmp_path: Path, appendfsync: str) -> None:
    with pytest.raises(EmbeddedRedisError, match="appendfsync must be one of always, everysec, no"):
        EmbeddedRedis(tmp_path, appendfsync=appendfsync)


def test_a_port_out_of_range_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedRedisError, match="port must be between 0 and 65535"):
        EmbeddedRedis(tmp_path, port=70000)


def test_a_failed_start_reports_the_log_and_releases_the_directory(make_redis: MakeRedis) -> None:
    broken = make_redis(start=False, extra_args=["--no-such-directive", "1"])
    with pytest.raises(EmbeddedRedisError, match=r"(?s)exited with code 1 during start-up.*Bad directive"):
        broken.start()
    assert lock_is_free(broken.data_dir)
    make_redis(data_dir=broken.data_dir)


def test_an_executable_that_is_not_redis_is_reported(make_redis: MakeRedis) -> None:
    false = shutil.which("false")
    assert false is not None
    with pytest.raises(EmbeddedRedisError, match="exited with code 1 during start-up"):
        make_redis(executable=false)


def test_a_start_timeout_kills_the_server_and_releases_the_directory(make_redis: MakeRedis) -> None:
    server = make_redis(start=False)
    with pytest.raises(EmbeddedRedisError, match="did not answer PING within 0s"):
        server.start(timeout=0)
    assert not server.is_running()
    assert lock_is_free(server.data_dir)


# --- stopping, crashing, restarting --------------------------------------------------------------------------


def test_stop_is_clean_and_a_second_start_works(make_redis: MakeRedis) -> None:
    server = make_redis()
    pid = server.pid
    assert pid is not None
    server.stop()
    assert not server.is_running() and server.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert lock_is_free(server.data_dir)
    assert "Redis is now ready to exit" in (server.data_dir / "redis.log").read_text()
    other = make_redis(data_dir=server.data_dir)
    other.stop()
    server.start()
    with connect(server.url) as client:
        assert client.ping()


def test_stop_kills_a_server_that_ignores_sigterm(make_redis: MakeRedis, caplog: pytest.LogCaptureFixture) -> None:
    server = make_redis()
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    with caplog.at_level(logging.WARNING, logger="dataq.embedded.redis_server"):
        server.stop(timeout=0.5)
    assert not server.is_running()
    assert lock_is_free(server.data_dir)
    assert "ignored SIGTERM" in caplog.text


def test_stop_and_kill_of_a_server_never_started_are_harmless(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "data")
    server.stop()
    server.kill()
    assert not server.is_running()


@pytest.mark.parametrize("port", [0, None], ids=["tcp", "unix-socket"])
def test_aof_survives_kill_and_restart(make_redis: MakeRedis, port: int | None) -> None:
    server = make_redis(port=port)
    url = server.url
    with connect(url) as client:
        client.set("record", "kept")
        client.rpush("active", "a", "b")
    server.kill()
    assert not server.is_running()
    assert lock_is_free(server.data_dir)
    server.start()
    assert server.url == url
    with connect(url) as client:
        assert client.get("record") == "kept"
        assert client.lrange("active", 0, -1) == ["a", "b"]


def test_start_while_running_is_a_no_op(make_redis: MakeRedis) -> None:
    server = make_redis()
    pid = server.pid
    server.start()
    assert server.pid == pid


# --- find_running ---------------------------------------------------------------------------------------------


def test_find_running_is_none_without_a_server(tmp_path: Path, make_redis: MakeRedis) -> None:
    assert find_running(tmp_path / "missing") is None
    assert find_running(tmp_path) is None
    server = make_redis()
    server.stop()
    assert find_running(server.data_dir) is None


def test_find_running_returns_the_url_of_a_server_this_process_owns(make_redis: MakeRedis) -> None:
    # Decided: it answers "where is the server of this directory", whoever owns it.
    server = make_redis(port=None)
    assert find_running(server.data_dir) == server.url


def test_find_running_returns_the_url_of_a_server_another_process_owns(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with foreign_owner(data_dir) as (_owner, url, redis_pid):
        assert find_running(data_dir) == url
        with pytest.raises(EmbeddedRedisError, match=rf"already used .* \(pid {redis_pid}\)"):
            EmbeddedRedis(data_dir, port=0).start()
    assert find_running(data_dir) is None
    assert lock_is_free(data_dir)


def test_a_server_whose_owner_died_keeps_its_directory(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with foreign_owner(data_dir) as (owner, url, redis_pid):
        owner.kill()
        owner.wait()
        # Orphaned but still writing its AOF: a second server on this directory would corrupt it.
        assert find_running(data_dir) == url
        with pytest.raises(EmbeddedRedisError, match=rf"\(pid {redis_pid}\)"):
            EmbeddedRedis(data_dir, port=0).start()


# --- the shared fixtures --------------------------------------------------------------------------------------


def test_redis_url_is_flushed_for_each_test(redis_server: EmbeddedRedis, request: pytest.FixtureRequest) -> None:
    with connect(redis_server.url) as client:
        client.set("left-over", "1")
    url = request.getfixturevalue("redis_url")
    with connect(url) as client:
        assert client.dbsize() == 0
