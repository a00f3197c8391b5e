#!/usr/bin/env python3
"""Compare recorded `clefserve bench` answers run against run (the FP8 gate and oracle scripts).

Usage: compare_answers.py GOT:REF ...   (labels: /tmp/fp8_gate_<label>/report.json)
Per pair: max |dp| over every probability both answered, choice flips, and flips among the choices
whose reference margin (top-1 minus top-2 probability) exceeds 0.05; requests are those REF answered.
"""
import json
import sys


def answers(label):
    try:
        r = json.load(open(f'/tmp/fp8_gate_{label}/report.json'))
    except OSError:
        return None
    return {q['id']: q['answer'] for q in r['requests'] if q.get('outcome') == 'ok' and q.get('answer')}


def probs(a):
    return {'true': a['noul']} if a.get('type') == 'noul' else a.get('probabilities', {})


def margin(a):
    p = sorted(probs(a).values(), reverse=True)
    return p[0] - p[1] if len(p) > 1 else 1.0


lines = ['pairs (run vs reference; API probabilities are rounded to 4 decimals):']
cache = {}
for pair in sys.argv[1:]:
    got_l, ref_l = pair.split(':')
    for lab in (got_l, ref_l):
        if lab not in cache:
            cache[lab] = answers(lab)
    ref, got = cache[ref_l], cache[got_l]
    if ref is None or got is None:
        lines.append(f'{got_l} vs {ref_l}: missing run')
        continue
    dp, n, choices, flips, wide, wide_flips, missing = 0.0, 0, 0, 0, 0, 0, 0
    for rid, qs in ref.items():
        if rid not in got:
            missing += 1
            continue
        for qid, a in qs.items():
            b = got[rid].get(qid)
            if b is None:
                missing += 1
                continue
            for k, p in probs(a).items():
                dp = max(dp, abs(p - probs(b).get(k, float('nan'))))
                n += 1
            if a.get('type') == 'choice':
                choices += 1
                f = a['choice'] != b['choice']
                flips += f
                if margin(a) > 0.05:
                    wide += 1
                    wide_flips += f
    share = 100 * flips / choices if choices else float('nan')
    lines.append(f'{got_l} vs {ref_l}: {len(ref) - missing} requests, max |dp| {dp:.4f} over {n} '
                 f'probabilities; choice flips {flips}/{choices} ({share:.1f}%); flips among margin '
                 f'> 0.05: {wide_flips}/{wide}; missing {missing}')
print('\n'.join(lines))
