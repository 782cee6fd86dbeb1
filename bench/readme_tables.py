#!/usr/bin/python3
"""Renders benchmark JSON files as markdown tables into README.md, between
marker lines, and leaves every other byte of the file as it was.

    /usr/bin/python3 bench/readme_tables.py --table compare_cnn=out/compare_cnn.json \\
        --table compare_cnn_bf16=out/compare_cnn_bf16.json
    # several files in one table (rows in the order given), another file, a dry run:
    /usr/bin/python3 bench/readme_tables.py --readme /tmp/README.md \\
        --table cnn=out/compare_cnn.json,out/compare_cnn_bf16.json --stdout

Each --table NAME=FILE[,FILE...] replaces the lines between

    <!-- table:NAME -->
    <!-- /table:NAME -->

(the marker lines stay) with the table rendered from FILE(s). A missing,
repeated or misordered marker stops the run with one line on stderr and
exit status 1, before anything is written.

What a file renders as is chosen from its content by RENDERERS, a list of
(name, test, render) entries: the first whose test accepts the JSON
renders it. To render another kind of JSON, add an entry. --kind NAME
forces one. Today: "scaling_validation", scripts/cluster/scaling.sh's
docs/scaling_validation.json (predicted against trained per layout and
link rate); "cpu_precision", bench/cpu_precision.sh's; "compare", bench/compare_pytorch.sh's output (config,
precision, PyTorch and hpctrain samples/s as the medians over the rounds,
their ratio, each round's ratio; then one line with the command, commit,
machine and statistic); "targets", chosen only by name (--table
NAME:targets=FILES, compare and cpu_precision files mixed), one row per
target of the CPU issue that the files measure, with whether it holds.
"""
import argparse, json, statistics, sys


def fail(msg):
    print("readme_tables: " + msg, file=sys.stderr)
    sys.exit(1)


def num(v):
    return "{:,.0f}".format(v)


# --- compare: bench/compare_pytorch.sh -------------------------------------

def is_compare(d):
    return isinstance(d, dict) and "summary" in d and "rows" in d and all(
        "pytorch_sps_median" in s for s in d["summary"])


def machine(d):
    m = d.get("machine") or {}
    s = m.get("cpu") or d.get("cpu") or "unknown CPU"
    if m.get("cpus_available"):
        s += ", %d CPUs" % m["cpus_available"]
    fl = m.get("flags") or {}
    marks = ["%s %s" % (f, "yes" if fl[f] else "no") for f in ("avx512_bf16", "amx_bf16") if f in fl]
    return s + (" (" + ", ".join(marks) + ")" if marks else "")


def cap(d):
    """The instruction-set cap of an ISA= run, with what oneDNN ran on each side."""
    c = d.get("isa_cap")
    if not c:
        return ""
    env = " ".join("%s=%s" % (k, c[k]) for k in ("DNNL_MAX_CPU_ISA", "OPENBLAS_CORETYPE") if c.get(k))
    isa = d.get("onednn_isa") or {}
    own = d.get("hpctrain_own_kernels_isa")  # recorded since session 23
    return "; capped with %s (oneDNN ran %s in hpctrain%s, %s in PyTorch)" % (
        env, isa.get("hpctrain") or "?", ", its own kernels " + own if own else "", isa.get("pytorch") or "?")


def command(d):
    if d.get("command"):
        return d["command"]
    rounds = len({r["round"] for r in d["rows"]})  # files from before the script recorded it
    return "bench/compare_pytorch.sh %s %d %s" % (d["model"], rounds, d.get("input", "28x28x1"))


def render_compare(docs):
    many = len({(d["model"], d.get("input", "28x28x1")) for d in docs}) > 1
    head = (["model", "input"] if many else []) + ["config", "precision", "PyTorch samples/s (median)",
                                                   "hpctrain samples/s (median)", "ratio of medians", "per-round ratios"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]

    def label(d):
        kern = d.get("hpctrain_kernels")
        return (d["model"], d.get("input", "28x28x1"), d.get("precision", "fp32")
                + (" (hpctrain %s)" % kern if kern and kern != "default" else "")
                + (" (%s cap)" % d["isa_cap"]["isa"].upper() if d.get("isa_cap") else ""))
    # Runs of the same arm at two commits (before and after a change): the
    # commit tells their rows apart.
    repeat = len({label(d) for d in docs}) < len(docs)
    for d in docs:
        prec = d.get("precision", "fp32")
        for s in d["summary"]:
            arm = label(d)[2] if s.get("precision", prec) == prec else s["precision"]
            cells = ([d["model"], d.get("input", "28x28x1")] if many else []) + [
                s["config"], arm + (", %s" % d.get("commit", "?") if repeat else ""),
                num(s["pytorch_sps_median"]), num(s["hpctrain_sps_median"]), "%.2f" % s["ratio_of_medians"],
                " / ".join("%.2f" % r for r in s["ratios"])]
            out.append("| " + " | ".join(cells) + " |")
    out.append("")
    for d in docs:
        dirty = " (work tree modified)" if d.get("worktree_dirty") else ""
        out.append("`%s`; commit %s%s; %s%s; %s; statistic: %s." % (
            command(d), d.get("commit", "?"), dirty, machine(d), cap(d), d.get("pytorch", "PyTorch"),
            d.get("statistic", "samples/s per side, ratio hpctrain / PyTorch").rstrip(".")))
        if len(docs) > 1:
            out.append("")
    while out and out[-1] == "":
        out.pop()
    return out


# --- cpu_precision: bench/cpu_precision.sh ----------------------------------

def is_cpu_precision(d):
    return isinstance(d, dict) and d.get("kind") == "cpu_precision"


def table(out, header, rows):
    """Appends a Markdown table to out (after a blank line when out has
    lines): header's cells, then each row's."""
    if out:
        out.append("")
    out += ["| %s |" % " | ".join(header), "|%s" % ("---|" * len(header))]
    out += ["| %s |" % " | ".join(r) for r in rows]


def render_cpu_precision(docs):
    out = []
    for d in docs:
        by = {(s["model"], s["threads"], s["kernels"]): s for s in d["step_summary"]}
        rows = []
        for (m, t, k), s in by.items():
            blas = by.get((m, t, "blas"))
            f32 = by.get((m, t, "dnnl"))
            sps = s["samples_per_second_median"]
            pk = s.get("fraction_of_peak_median", 0)
            rows.append([m, "%d" % t, k, num(sps), "%.0f%%" % (100 * s["fraction_of_sgemm_median"]),
                         "%.0f%% (%s)" % (100 * pk, "bf16" if "bf16" in k else "fp32") if pk else "-",
                         "%.2f" % (sps / blas["samples_per_second_median"]) if blas else "-",
                         "%.2f" % (sps / f32["samples_per_second_median"]) if f32 and k == "dnnl bf16" else "-",
                         " / ".join(num(x) for x in s["per_round_sps"])])
        if rows:
            table(out, ["model", "threads", "kernels", "samples/s (median)", "% of same-run SGEMM",
                        "% of the cores' peak, same run", "vs blas", "bf16 / fp32", "per round"], rows)
        if d.get("e2e_summary"):
            table(out, ["model", "rounds", "fp32 samples/s (median)", "bf16 samples/s (median)",
                        "bf16 / fp32 (ratio of the medians)", "bf16 / fp32 per round"],
                  [[e["model"], "%d" % e["rounds"], num(e["fp32_median"]), num(e["bf16_median"]),
                    "**%.2f**" % e["ratio_of_medians"], " / ".join("%.2f" % x for x in e["per_round_ratio"])]
                   for e in d["e2e_summary"]])
        if d.get("accuracy"):
            sched = d.get("schedule", "constant")
            table(out, ["model", "seed", "precision", "schedule", "epochs", "test accuracy after epoch 1",
                        "after the last", "samples/s (2 x 1, end to end)"],
                  [[a["model"], "%s" % a.get("seed", 1), arm(a), a.get("schedule", sched), "%d" % a["epochs"],
                    "%.2f%%" % (100 * a["accuracy"][0]), "%.2f%%" % (100 * a["accuracy"][-1]),
                    num(a["samples_per_second"][-1])] for a in d["accuracy"]])
            out += speed_summary(d["accuracy"])
            out += accuracy_summary(d["accuracy"]) if sched == "constant" else finished_summary(d["accuracy"], sched)
        dirty = " (work tree modified)" if d.get("dirty") else ""
        out += ["", "Commands: %s. Commit %s%s; %s, %d CPUs, %s; statistic: %s." % (
            "; ".join("`%s`" % c for c in d["commands"]), d.get("commit", "?"), dirty, d.get("cpu", "?"),
            d.get("cpus", 0), d.get("dnnl_isa", "?"), d.get("statistic", "").rstrip("."))]
    return out


def arm(a):
    """An accuracy row's arithmetic: its precision, and the kernels when
    they are not oneDNN's (the fp32 noise-floor run is "fp32 blas")."""
    k = a.get("kernels", "dnnl")
    return a["precision"] if k == "dnnl" else "%s %s" % (a["precision"], k)


def speed_summary(acc):
    """A line per model and epoch count on bf16 against fp32 end to end:
    the ratio of the two runs' samples/s (each its last metrics line) for
    each seed, and the median over the seeds."""
    runs = {(a["model"], a.get("seed", 1), arm(a), a["epochs"]): a for a in acc}
    out = []
    for m in dict.fromkeys(a["model"] for a in acc):
        for e in sorted({k[3] for k in runs if k[0] == m}):
            seeds = [k[1] for k in runs if k[0] == m and k[2] == "fp32" and k[3] == e and (m, k[1], "bf16", e) in runs]
            if not seeds:
                continue
            r = [runs[(m, s, "bf16", e)]["samples_per_second"][-1] / runs[(m, s, "fp32", e)]["samples_per_second"][-1] for s in seeds]
            out += ["", "%s, bf16 / fp32 samples/s end to end, %d-epoch runs, same seed (seeds %s): %s (median %.2f)." % (
                m, e, ", ".join(map(str, seeds)), " / ".join("%.2f" % x for x in r), statistics.median(r))]
    return out


def accuracy_summary(acc):
    """Lines on bf16 against fp32 with the same seed, per model: the
    differences in points after epoch 1 and after the last, their mean over
    seeds, and fp32's own range over the seeds (what a seed alone moves).
    Where the JSON has the fp32 run on the blas kernels too, a second line
    gives it minus fp32 on oneDNN (what fp32's rounding alone moves one
    seed), and both lines the mean of the absolute differences."""
    runs = {(a["model"], a.get("seed", 1), arm(a)): a for a in acc}
    out = []
    for m in dict.fromkeys(a["model"] for a in acc):
        for other, what in (("bf16", "bf16 minus fp32"), ("fp32 blas", "fp32 on the blas kernels minus fp32 on oneDNN")):
            seeds = [s for (mm, s, p) in runs if mm == m and p == "fp32" and (m, s, other) in runs]
            if not seeds:
                continue
            parts = []
            for i, when in ((0, "after epoch 1"), (-1, "after the last")):
                d = [100 * (runs[(m, s, other)]["accuracy"][i] - runs[(m, s, "fp32")]["accuracy"][i]) for s in seeds]
                f = [100 * runs[(m, s, "fp32")]["accuracy"][i] for s in seeds]
                spread = "; fp32 alone spans %.2f over the seeds" % (max(f) - min(f)) if len(seeds) > 1 and other == "bf16" else ""
                parts.append("%s %s (mean %+.2f, mean size %.2f%s)" % (
                    when, " / ".join("%+.2f" % x for x in d), sum(d) / len(d), sum(map(abs, d)) / len(d), spread))
            out += ["", "%s, %s in points, same seed (seeds %s): %s." % (
                m, what, ", ".join(map(str, seeds)), "; ".join(parts))]
    return out


def finished_summary(acc, sched):
    """accuracy_summary for runs that each train to the end of their own
    schedule (cpu_precision.sh SCHEDULE=...): per model and epoch count,
    the final accuracies of the same seed compared, bf16 and fp32 on the
    blas kernels each minus fp32 on oneDNN."""
    runs = {(a["model"], a.get("seed", 1), arm(a), a["epochs"]): a for a in acc}
    out = []
    for m in dict.fromkeys(a["model"] for a in acc):
        for other, what in (("bf16", "bf16 minus fp32"), ("fp32 blas", "fp32 on the blas kernels minus fp32 on oneDNN")):
            parts = []
            for e in sorted({k[3] for k in runs if k[0] == m}):
                seeds = [k[1] for k in runs if k[0] == m and k[2] == "fp32" and k[3] == e and (m, k[1], other, e) in runs]
                if not seeds:
                    continue
                d = [100 * (runs[(m, s, other, e)]["accuracy"][-1] - runs[(m, s, "fp32", e)]["accuracy"][-1]) for s in seeds]
                parts.append("%d-epoch runs %s (mean %+.2f, mean size %.2f, largest %.2f)" % (
                    e, " / ".join("%+.2f" % x for x in d), sum(d) / len(d), sum(map(abs, d)) / len(d), max(map(abs, d))))
            if parts:
                out += ["", "%s, %s in points at the end of a %s schedule, same seed (seeds %s): %s." % (
                    m, what, sched, ", ".join(map(str, sorted({k[1] for k in runs if k[0] == m}))), "; ".join(parts))]
    return out


# --- scaling_validation: scripts/cluster/scaling.sh ------------------------

def is_scaling_validation(d):
    return isinstance(d, dict) and "rows" in d and all("pred_measured" in r and "train" in r for r in d["rows"])


def render_scaling_validation(docs):
    """Predicted (with the link the run measured) against trained, one row
    per layout, the link rates side by side."""
    out = []
    for d in docs:
        rates = sorted({r["rate_mbit"] for r in d["rows"]}, reverse=True)
        layouts = []
        for r in d["rows"]:
            k = (r["hosts"], r.get("ranks_per_host", 1))
            if k not in layouts:
                layouts.append(k)
        by = {(r["hosts"], r.get("ranks_per_host", 1), r["rate_mbit"]): r for r in d["rows"]}
        head = ["hosts x ranks", "model"] + ["%g Mbit/s: predicted / trained samples/s" % q for q in rates] + [
            "trained with `-collective mpi` (%s Mbit/s)" % ", ".join("%g" % q for q in rates)]
        out += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        for h, rp in sorted(layouts, key=lambda k: (-k[1], k[0] * k[1])):
            rows = [by.get((h, rp, q)) for q in rates]
            alg = next((r.get("algorithm") for r in rows if r and r.get("algorithm")), "-")
            cells = ["%d x %d" % (h, rp), alg]
            for r in rows:
                cells.append("-" if not r else "%s / %s (%+.0f%%)" % (
                    num(r["pred_measured"]), num(r["train"]), 100 * (r["pred_measured"] / r["train"] - 1)))
            mpi = [num(r["train_mpi"]) for r in rows if r and r.get("train_mpi")]
            cells.append(", ".join(mpi) if mpi else "-")
            out.append("| " + " | ".join(cells) + " |")
        out += ["", "`sudo %s`; commit %s; %s, %s CPUs, kernel %s; predicted: `bench scaling` with the link its own sweep "
                "measured; trained: `hpctrain train`'s final samples/s, %s." % (
                    d.get("command", "scripts/cluster/scaling.sh"), d.get("commit", "?"), d.get("cpu", "?"),
                    d.get("cpus", "?"), d.get("kernel", "?"), "one run each")]
    return out


# --- targets: the CPU issue's targets, one row each, from the files above --

def is_targets_input(d):
    return is_compare(d) or is_cpu_precision(d)


def spread(xs, fmt="%.2f"):
    return (fmt + "-" + fmt) % (min(xs), max(xs))


def render_targets(docs):
    """One row per target of the CPU issue that a file measures: what is
    asked, the figure (the statistic the file's own table gives), whether
    it holds, and the run. The rows come from the data, not from prose, so
    a new measurement moves them with `make readme-tables`:
    compare files give 2 x 1 against PyTorch (fp32 of the reference CNN,
    with or without the AVX2 cap; bf16 of any model, against autocast);
    cpu_precision files give bf16 / fp32 end to end, the 2-thread step as a
    share of the same run's SGEMM, and bf16's accuracy against fp32 with the
    same seed (finished trainings for a schedule that ends, snapshots for a
    constant rate), beside what fp32's own rounding moves it by (fp32 on the
    blas kernels against fp32 on oneDNN, same seed) where the file has it."""
    rows = []

    def add(what, need, got, ok, d):
        rows.append([what, need, got, "yes" if ok else "**no**", "%s%s, %s" % (
            d.get("commit", "?"), " (dirty)" if d.get("dirty") or d.get("worktree_dirty") else "", d.get("cpu", "?"))])

    for d in docs:
        if is_compare(d):
            s = next((s for s in d["summary"] if s["config"] == "2x1"), None)
            if not s:
                continue
            got = "%.2f (rounds %s)" % (s["ratio_of_medians"], spread(s["ratios"]))
            if d["precision"] == "fp32" and d["model"] == "cnn":
                capped = (d.get("isa_cap") or {}).get("DNNL_MAX_CPU_ISA")
                add("fp32 2 x 1, %s, against PyTorch DDP%s" % (d["model"], ", both sides held to " + capped if capped else ""),
                    ">= 2.2", got, s["ratio_of_medians"] >= 2.2, d)
            elif d["precision"] == "bf16":
                add("bf16 2 x 1, %s, against PyTorch's autocast" % d["model"], ">= 2.5", got, s["ratio_of_medians"] >= 2.5, d)
            continue
        for e in d.get("e2e_summary") or []:
            add("bf16 / fp32 end to end, 2 x 1, %s (%d alternating rounds)" % (e["model"], e["rounds"]), ">= 1.6",
                "%.2f (rounds %s)" % (e["ratio_of_medians"], spread(e["per_round_ratio"])), e["ratio_of_medians"] >= 1.6, d)
        for st in d.get("step_summary") or []:
            if st["threads"] == 2 and st["kernels"] == "dnnl":
                f = st["fraction_of_sgemm_median"]
                add("fp32 step at 2 threads, %s, share of the same run's 2-thread SGEMM" % st["model"], ">= 75%",
                    "%.0f%%" % (100 * f), f >= 0.75, d)
        runs = {(a["model"], a.get("seed", 1), arm(a), a["epochs"]): a for a in d.get("accuracy") or []}
        sched = d.get("schedule", "constant")
        for m in dict.fromkeys(k[0] for k in runs):
            for e in sorted({k[3] for k in runs if k[0] == m}):
                seeds = sorted(k[1] for k in runs if k[0] == m and k[2] == "fp32" and k[3] == e and (m, k[1], "bf16", e) in runs)
                if not seeds:
                    continue
                pick = [-1] if sched != "constant" else ([0, -1] if e > 1 else [-1])
                for i in pick:
                    diff = [100 * abs(runs[(m, s, "bf16", e)]["accuracy"][i] - runs[(m, s, "fp32", e)]["accuracy"][i]) for s in seeds]
                    if sched == "constant":
                        at = 1 if i == 0 else len(runs[(m, seeds[0], "fp32", e)]["accuracy"])
                        when = "after epoch %d of a %d-epoch constant-rate run (a snapshot)" % (at, e)
                    else:
                        when = "a finished %d-epoch %s schedule" % (e, sched)
                    floor = [100 * abs(runs[(m, s, "fp32 blas", e)]["accuracy"][i] - runs[(m, s, "fp32", e)]["accuracy"][i])
                             for s in seeds if (m, s, "fp32 blas", e) in runs]
                    add("bf16 test accuracy within 0.3 points of fp32, %s, %s" % (m, when), "<= 0.30",
                        "largest %.2f (seeds %s: %s)%s" % (max(diff), ", ".join(map(str, seeds)), " / ".join("%.2f" % x for x in diff),
                                                          "; fp32 on the blas kernels, largest %.2f" % max(floor) if floor else ""),
                        max(diff) <= 0.3, d)
    if not rows:
        fail("targets: none of the files measures a target")
    out = []
    table(out, ["target", "asked", "measured", "met", "run (commit, machine)"], rows)
    return out


RENDERERS = [  # (name, test of one JSON document, render of a list of them -> lines)
    ("compare", is_compare, render_compare),
    ("cpu_precision", is_cpu_precision, render_cpu_precision),
    ("scaling_validation", is_scaling_validation, render_scaling_validation),
    ("targets", is_targets_input, render_targets),
]
BY_NAME_ONLY = {"targets"}  # chosen only by --table NAME:targets=FILES, never by content


def render(name, paths, kind):
    docs = []
    for p in paths:
        try:
            with open(p) as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as e:
            fail("table %s: %s: %s" % (name, p, e))
    for rname, test, fn in RENDERERS:
        if (kind == rname) if kind else (rname not in BY_NAME_ONLY and all(test(d) for d in docs)):
            return fn(docs)
    fail("table %s: no renderer%s for %s (known: %s)" % (
        name, " " + kind if kind else "", ", ".join(paths), ", ".join(r[0] for r in RENDERERS)))


def replace(lines, name, body):
    """lines with the lines between name's markers replaced by body."""
    start, end = "<!-- table:%s -->" % name, "<!-- /table:%s -->" % name
    at = [i for i, l in enumerate(lines) if l.strip() == start]
    to = [i for i, l in enumerate(lines) if l.strip() == end]
    if len(at) != 1 or len(to) != 1 or to[0] < at[0]:
        fail("table %s: want one %s line and, after it, one %s line; found %d and %d%s" % (
            name, start, end, len(at), len(to), " in the wrong order" if len(at) == len(to) == 1 else ""))
    nl = "\r\n" if lines[at[0]].endswith("\r\n") else "\n"
    return lines[:at[0] + 1] + [b + nl for b in body] + lines[to[0]:]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--readme", default="README.md")
    p.add_argument("--table", action="append", default=[], metavar="NAME[:KIND]=FILE[,FILE...]", required=True)
    p.add_argument("--kind", help="renderer for every table (default: chosen by content): " +
                   ", ".join(r[0] for r in RENDERERS))
    p.add_argument("--stdout", action="store_true", help="print the new README instead of writing it")
    a = p.parse_args()
    if a.kind and a.kind not in [r[0] for r in RENDERERS]:
        fail("--kind %s: known %s" % (a.kind, ", ".join(r[0] for r in RENDERERS)))
    try:
        with open(a.readme, newline="") as f:
            lines = f.read().splitlines(keepends=True)
    except OSError as e:
        fail(str(e))
    for t in a.table:
        name, eq, files = t.partition("=")
        name, _, kind = name.partition(":")
        if not eq or not name or not files:
            fail("--table %r: want NAME[:KIND]=FILE[,FILE...]" % t)
        if kind and kind not in [r[0] for r in RENDERERS]:
            fail("--table %s: kind %s: known %s" % (t, kind, ", ".join(r[0] for r in RENDERERS)))
        lines = replace(lines, name, render(name, files.split(","), kind or a.kind))
    text = "".join(lines)
    if a.stdout:
        sys.stdout.write(text)
        return
    with open(a.readme, "w", newline="") as f:
        f.write(text)


if __name__ == "__main__":
    main()
