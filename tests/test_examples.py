"""The demos run and say what they promise."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(script, *args, tmp_path):
    return subprocess.run([sys.executable, str(ROOT / "examples" / script), "-o", str(tmp_path),
                           *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_echo_demo_answers_arp_ping_and_udp(tmp_path):
    result = run("echo_demo.py", tmp_path=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    replies = [line for line in lines if line.startswith("ok ")]
    assert len(replies) == 5 and not any(line.startswith("BAD") for line in lines)
    assert "is at 02:00:00:00:00:02" in result.stdout
    assert "echo-reply" in result.stdout
    assert "counted in udp_rx_bad_checksum" in result.stdout
    assert "<svg" in (tmp_path / "udp_echo.svg").read_text()
