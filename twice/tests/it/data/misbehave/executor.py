"""An executor that misbehaves in one way, named by its first argument (see misbehave.rs).

Modes that wrap the reference executor take its path as the second argument and exec it (or
run it as a child), so the scenario itself passes and only the misbehaviour is under test.
"""
import json, os, signal, socket, subprocess, sys, time

MODE = sys.argv[1]


def out(text):
    sys.stdout.write(text)
    sys.stdout.flush()


def first_request():
    return json.loads(sys.stdin.readline())


def sleep_forever():
    while True:
        time.sleep(1000)


if MODE == "silent":
    # Reads every request, answers none.
    for _ in sys.stdin:
        pass
    sleep_forever()
elif MODE == "garbage":
    for _ in sys.stdin:
        out("this is not json at all\n")
elif MODE == "partial":
    first_request()
    out('{"type": "init_ok", "in_re')
    for _ in sys.stdin:
        pass
    sleep_forever()
elif MODE == "long":
    # 64 MiB without a newline, streamed, then silence.
    first_request()
    chunk = "a" * (1 << 20)
    try:
        for _ in range(64):
            out(chunk)
    except BrokenPipeError:
        os._exit(0)
    sleep_forever()
elif MODE == "exit_mid_reply":
    request = first_request()
    reply = json.dumps({"type": "init_ok", "in_reply_to": request["msg_id"], "executor": {"name": "x"}})
    out(reply[: len(reply) // 2])
    sys.stderr.write("fatal: gone mid-reply\n")
    os._exit(3)
elif MODE == "deaf":
    # Answers init, then never reads its stdin again.
    request = first_request()
    out(json.dumps({"type": "init_ok", "in_reply_to": request["msg_id"],
                    "executor": {"name": "deaf"}, "actions": ["payments.refund"]}) + "\n")
    sleep_forever()
elif MODE == "flood":
    # 200 MB of stderr as fast as it goes, last words, then exit 4 before answering init.
    block = ("x" * 1023 + "\n").encode() * 1024
    for _ in range(200):
        os.write(2, block)
    os.write(2, b"last words: flooded\n")
    os._exit(4)
elif MODE == "forks":
    # A child that inherits every pipe, and a double-forked daemon in a session of its own
    # that listens on a port and holds a file open; then the reference executor, which
    # behaves.
    subprocess.Popen(["sleep", "1000"])
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            held = open(__file__)
            sleep_forever()
        os._exit(0)
    os.wait()
    # A daemon that also clears its environment (but for the test's marker): only its
    # parentage says where it came from.
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve("/bin/sleep", ["sleep", "1000"], {"TWICE_TEST_MARKER": os.environ["TWICE_TEST_MARKER"]})
        os._exit(0)
    os.wait()
    os.execv(sys.argv[2], [sys.argv[2]])
elif MODE == "noterm":
    # Ignores SIGTERM, and lingers after shutdown_ok: a proxy in front of the reference
    # executor that stays up once it has passed the shutdown_ok on.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.argv[2]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for line in sys.stdin:
        child.stdin.write(line)
        child.stdin.flush()
        while True:
            reply = child.stdout.readline()
            out(reply)
            if json.loads(reply).get("type") != "event":
                break
        if json.loads(reply).get("type") == "shutdown_ok":
            sleep_forever()
else:
    sys.exit(f"unknown mode {MODE}")
