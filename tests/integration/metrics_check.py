#!/usr/bin/env python3
"""Checks kiln tune's /metrics: a strict parser of the Prometheus text
exposition format (version 0.0.4), and a comparison of the counters with
the record store (`kiln db export`).

  metrics_check.py lint FILE
      every line against the grammar; exit 1 naming the first bad line.
  metrics_check.py compare FILE EXPORT STORE_DIR [--restored N]
      the job's counters against the store's records (see compare()).
  metrics_check.py selftest
      the parser rejects each of a list of broken expositions.
"""
import json
import math
import os
import re
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
FLOAT = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN")
TIMESTAMP = re.compile(r"-?[0-9]+")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


class FormatError(Exception):
    pass


def unescape(s, allowed, what):
    """Resolves backslash escapes; only those in `allowed` are legal."""
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            if i + 1 >= len(s) or s[i + 1] not in allowed:
                raise FormatError("invalid escape in %s: %r" % (what, s[i:i + 2]))
            out.append("\n" if s[i + 1] == "n" else s[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_labels(line, i):
    """Parses '{a="x",b="y"}' starting at line[i] == '{'; returns
    (dict, index after '}')."""
    labels = {}
    i += 1
    while True:
        if i < len(line) and line[i] == "}":
            return labels, i + 1
        m = LABEL.match(line, i)
        if not m:
            raise FormatError("expected a label name at column %d" % (i + 1))
        name = m.group(0)
        if name.startswith("__"):
            raise FormatError("label name %s is reserved (starts with __)" % name)
        if name in labels:
            raise FormatError("label %s given twice" % name)
        i = m.end()
        if line[i:i + 2] != '="':
            raise FormatError("expected =\" after label %s" % name)
        i += 2
        j = i
        while j < len(line) and line[j] != '"':
            j += 2 if line[j] == "\\" else 1
        if j >= len(line):
            raise FormatError("unterminated value of label %s" % name)
        labels[name] = unescape(line[i:j], '\\"n', "label value")
        i = j + 1
        if i < len(line) and line[i] == ",":
            i += 1
        elif i >= len(line) or line[i] != "}":
            raise FormatError("expected , or } after label %s" % name)


def family_of(name, types):
    for suffix, kinds in (("_bucket", ("histogram",)),
                          ("_sum", ("histogram", "summary")),
                          ("_count", ("histogram", "summary"))):
        base = name[:-len(suffix)]
        if name.endswith(suffix) and types.get(base) in kinds:
            return base
    return name


def parse(text):
    """Returns {(name, frozenset(labels.items())): value} and the types;
    raises FormatError("line N: ...") on the first violation."""
    if text and not text.endswith("\n"):
        raise FormatError("the last line does not end with a newline")
    types, helps, samples = {}, {}, {}
    closed, current = set(), None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        try:
            current = parse_line(line, types, helps, samples, closed, current)
        except FormatError as e:
            raise FormatError("line %d: %s: %r" % (n, e, line))
    return samples, types, helps


def enter_family(fam, closed, current):
    """A family's lines must be contiguous."""
    if fam != current:
        if fam in closed:
            raise FormatError("lines of %s are not contiguous" % fam)
        if current is not None:
            closed.add(current)
    return fam


def parse_line(line, types, helps, samples, closed, current):
    if line.strip() == "":
        return current
    if line.startswith("#"):
        parts = line[1:].lstrip(" \t").split(None, 2)
        if not parts or parts[0] not in ("HELP", "TYPE"):
            return current  # a plain comment
        if len(parts) < 2 or not NAME.fullmatch(parts[1]):
            raise FormatError("%s without a valid metric name" % parts[0])
        name = parts[1]
        current = enter_family(name, closed, current)
        if parts[0] == "HELP":
            if name in helps:
                raise FormatError("second HELP line for %s" % name)
            helps[name] = unescape(parts[2] if len(parts) > 2 else "", "\\n",
                                   "HELP")
        else:
            if name in types:
                raise FormatError("second TYPE line for %s" % name)
            if len(parts) < 3 or parts[2] not in TYPES:
                raise FormatError("TYPE of %s must be one of %s" %
                                  (name, "|".join(TYPES)))
            if any(k[0] == name or family_of(k[0], {name: parts[2]}) == name
                   for k in samples):
                raise FormatError("TYPE of %s after its samples" % name)
            types[name] = parts[2]
        return current
    m = NAME.match(line)
    if not m:
        raise FormatError("expected a metric name")
    name, i = m.group(0), m.end()
    labels = {}
    if i < len(line) and line[i] == "{":
        labels, i = parse_labels(line, i)
    rest = line[i:]
    if not rest or rest[0] not in " \t":
        raise FormatError("expected blank and a value after %s" % name)
    fields = rest.split()
    if len(fields) not in (1, 2) or not FLOAT.fullmatch(fields[0]):
        raise FormatError("expected a value [timestamp], got %r" % rest)
    if len(fields) == 2 and not TIMESTAMP.fullmatch(fields[1]):
        raise FormatError("bad timestamp %r" % fields[1])
    value = float(fields[0])
    fam = family_of(name, types)
    current = enter_family(fam, closed, current)
    kind = types.get(fam, "untyped")
    if kind == "counter" and (math.isnan(value) or value < 0):
        raise FormatError("counter %s is negative or NaN" % name)
    if kind == "summary" and name == fam and "quantile" not in labels:
        raise FormatError("summary sample %s without quantile" % name)
    if kind == "histogram" and name.endswith("_bucket") and "le" not in labels:
        raise FormatError("histogram bucket %s without le" % name)
    key = (name, frozenset(labels.items()))
    if key in samples:
        raise FormatError("series %s%s given twice" % (name, labels))
    samples[key] = value
    return current


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError("not UTF-8: %s" % e)
    return parse(text)


def lint(path, require_help=True):
    samples, types, helps = load(path)
    if not samples:
        raise FormatError("no samples")
    if require_help:
        for name, _ in samples:
            fam = family_of(name, types)
            if fam not in types or fam not in helps:
                raise FormatError("%s has no TYPE or no HELP line" % fam)
    return samples


def get(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def series(samples, name):
    return [(dict(k[1]), v) for k, v in samples.items() if k[0] == name]


def check(cond, msg):
    if not cond:
        raise FormatError(msg)


def compare(path, export, store_dir, restored=0):
    """A finished job on a store that held `restored` records before it:
    results by status and the tasks' trials, valid trials and best latency
    equal what the store holds; the store size is its data file's."""
    s = lint(path)
    check(get(s, "kiln_job_done") == 1, "kiln_job_done is not 1")
    targets = {l["target"] for l, _ in series(s, "kiln_agents")}
    check(len(targets) == 1, "expected one agent target, got %s" % targets)
    exact = targets.pop()
    names, recs = {}, []
    with open(export) as f:
        for line in f:
            o = json.loads(line)
            if o["type"] == "workload":
                names[o["key"]] = o["name"]
            else:
                recs.append(o)
    # A task target "cpu" means this machine's exact target; any other
    # target in the store would be another job's.
    for r in recs:
        check(r["target"] in ("cpu", exact),
              "record seq %s has target %s, not %s" % (r["seq"], r["target"],
                                                       exact))
    by_status = {}
    for r in recs:
        st = r["status"].lower().replace("status_", "", 1)
        by_status[st] = by_status.get(st, 0) + 1
    res = {l["status"]: v for l, v in series(s, "kiln_results_total")}
    check(len(res) == 8, "kiln_results_total has %d statuses" % len(res))
    # After a resume, the records restored may be of any status: only the
    # total of this job's results is compared then.
    for st, v in res.items():
        check(restored or v == by_status.get(st, 0),
              "kiln_results_total{status=%s} is %g, the store has %d" %
              (st, v, by_status.get(st, 0)))
    check(sum(res.values()) == len(recs) - restored,
          "results %g != store records %d - restored %d" %
          (sum(res.values()), len(recs), restored))
    check(get(s, "kiln_submitted_total") == sum(res.values()),
          "submitted != results")
    check(get(s, "kiln_in_flight") == 0 and get(s, "kiln_queue_depth") == 0,
          "candidates left in flight or queued")
    trials = series(s, "kiln_task_trials")
    check(trials, "no kiln_task_trials")
    check(sum(v for _, v in trials) == len(recs), "sum of task trials %g != "
          "store records %d" % (sum(v for _, v in trials), len(recs)))
    check(sum(v for _, v in series(s, "kiln_task_restored_trials")) ==
          restored, "restored trials differ")
    for l, v in trials:
        w = [r for r in recs if names.get(r["workload_key"]) == l["workload"]]
        ok = [r for r in w if r["status"] == "STATUS_OK"]
        check(v == len(w), "task %s: %g trials, store has %d" %
              (l["workload"], v, len(w)))
        check(get(s, "kiln_task_valid_trials", **l) == len(ok),
              "task %s: valid trials differ" % l["workload"])
        best = get(s, "kiln_task_best_latency_seconds", target=exact, **l)
        # Simulated records are never a best (common/kl_record.h).
        real = [r for r in ok if not r.get("simulated")]
        if not real:
            check(best is None, "task %s: a best without a valid record" %
                  l["workload"])
            continue
        want = min(float(r["median_s"]) for r in real)
        check(best is not None and abs(best - want) <= 1e-12 * want,
              "task %s: best %s s, store %r s" % (l["workload"], best, want))
    size = os.path.getsize(os.path.join(store_dir, "data.mdb"))
    check(get(s, "kiln_store_bytes") == size,
          "kiln_store_bytes %s != data.mdb %d" % (get(s, "kiln_store_bytes"),
                                                  size))
    return len(recs)


BAD = [
    ("no newline at the end", "# TYPE a gauge\na 1"),
    ("two TYPE lines", "# TYPE a gauge\n# TYPE a gauge\na 1\n"),
    ("unknown type", "# TYPE a meter\na 1\n"),
    ("TYPE after samples", "a 1\n# TYPE a gauge\n"),
    ("bad metric name", "# TYPE 1a gauge\n1a 1\n"),
    ("bad label escape", '# TYPE a gauge\na{x="\\t"} 1\n'),
    ("unterminated label", '# TYPE a gauge\na{x="y} 1\n'),
    ("unquoted label", "# TYPE a gauge\na{x=y} 1\n"),
    ("reserved label", '# TYPE a gauge\na{__x="y"} 1\n'),
    ("duplicate label", '# TYPE a gauge\na{x="1",x="2"} 1\n'),
    ("missing value", "# TYPE a gauge\na\n"),
    ("bad value", "# TYPE a gauge\na 1.2.3\n"),
    ("bad timestamp", "# TYPE a gauge\na 1 12.5\n"),
    ("trailing junk", "# TYPE a gauge\na 1 2 3\n"),
    ("negative counter", "# TYPE a counter\na -1\n"),
    ("duplicate series", '# TYPE a gauge\na{x="1"} 1\na{x="1"} 2\n'),
    ("interleaved families",
     "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n"),
    ("two HELP lines", "# HELP a x\n# HELP a y\n# TYPE a gauge\na 1\n"),
    ("bad HELP escape", "# HELP a x\\ty\n# TYPE a gauge\na 1\n"),
    ("summary without quantile", "# TYPE a summary\na 1\n"),
    ("raw newline in label", '# TYPE a gauge\na{x="1\n"} 1\n'),
]
GOOD = ('# HELP a The \\\\ a\\n.\n# TYPE a counter\na{x="q\\"\\\\\\n",} 1 5\n'
        "# HELP b b\n# TYPE b summary\nb{quantile=\"0.5\"} NaN\nb_sum +Inf\n"
        "b_count 3\n# a comment\n\n# HELP c c\n# TYPE c gauge\nc -1e-3\n")


def selftest():
    for what, text in BAD:
        try:
            parse(text)
        except FormatError:
            continue
        raise FormatError("selftest: accepted a broken exposition (%s)" % what)
    samples, _, _ = parse(GOOD)
    check(get(samples, "a", x='q"\\\n') == 1, "selftest: label unescaping")
    check(len(samples) == 5, "selftest: expected 5 samples")


def main(argv):
    try:
        if len(argv) == 3 and argv[1] == "lint":
            print("%d samples" % len(lint(argv[2])))
        elif len(argv) in (5, 7) and argv[1] == "compare":
            restored = int(argv[6]) if len(argv) == 7 else 0
            print("%d records agree" % compare(argv[2], argv[3], argv[4],
                                               restored))
        elif len(argv) == 2 and argv[1] == "selftest":
            selftest()
            print("selftest ok (%d broken expositions refused)" % len(BAD))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (FormatError, OSError, ValueError, KeyError) as e:
        print("metrics_check: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
