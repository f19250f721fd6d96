"""Random SQL92 selector cases for run.sh: one per line, the expression (line breaks written
as \\n), then property name/value pairs, tab-separated.

usage: gen_cases.py COUNT SEED NOISE   (NOISE: chance of one stray character per case)
"""
import random, sys
r = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
props = ['a', 'b', 'c', 'TAGS', 'A']
vals = ['1', '5', '-3', '7.5', 'abc', 'true', 'TRUE', 'false', '', '3000000000', ' 5', '1e3', 'NaN', '0x10', '+4', '5.0', 'x', "it's", '6', '9', '2147483648', '-0', '0', 'Infinity', '1f']
def lit():
    return r.choice(["'x'", "'abc'", "'5'", "''", "'it''s'", '5', '0', '7.5', '5.0', '3000000000', '5L', 'TRUE', 'FALSE', 'NULL', '1e3', '.5', '2147483648', '9223372036854775807', '0.0', '1e400', "'true'", "'7.5'", "'NaN'", '-5', '- 3', '+2', '-2147483648', '1E-400'])
def operand(d):
    c = r.random()
    if c < 0.45: return r.choice(props)
    if c < 0.85: return lit()
    if c < 0.92 and d > 0: return '(' + expr(d - 1) + ')'
    return r.choice(['-', '+', 'NOT ']) + operand(d - 1 if d > 0 else 0)
def cond(d):
    o = operand(d)
    c = r.randrange(14)
    if c == 0: return f"{o} {r.choice(['=', '<>', '>', '>=', '<', '<='])} {operand(d)}"
    if c == 1: return f"{o} {r.choice(['=', '<>'])} {operand(d)}"
    if c == 2: return f"{o} {r.choice(['', 'NOT '])}BETWEEN {operand(d)} AND {operand(d)}"
    if c == 3: return f"{o} {r.choice(['', 'NOT '])}IN ({', '.join(r.choice([lit(), chr(39)+'x'+chr(39), chr(39)+'5'+chr(39)]) for _ in range(r.randint(1,3)))})"
    if c == 4: return f"{o} IS {r.choice(['', 'NOT '])}NULL"
    if c == 5: return f"{o} {r.choice(['', 'NOT '])}{r.choice(['CONTAINS', 'STARTSWITH', 'ENDSWITH'])} {r.choice([chr(39)+'b'+chr(39), chr(39)+chr(39), chr(39)+'1'+chr(39), 'x'])}"
    if c == 6: return o
    if c == 7: return f"{o} > {lit()}"
    if c == 8: return f"{r.choice(props)} = {lit()}"
    if c == 9: return f"{r.choice(props)} {r.choice(['>', '<', '>=', '<='])} {r.choice(['5', '5.0', '3000000000', '-3', '0.5', r.choice(props)])}"
    if c == 10: return f"{r.choice(props)} BETWEEN {r.choice(['1', '-3', '1.5'])} AND {r.choice(['6', '9.5', '3000000000'])}"
    if c == 11: return f"NOT {o}"
    if c == 12: return f"{o} = {operand(d)} = {operand(d)}"
    return f"{r.choice(props)} {r.choice(['IN', 'NOT IN'])} ('5', 'x', 'abc', '')"
def expr(d):
    e = cond(d)
    for _ in range(r.choice([0, 0, 1, 1, 2])):
        e = f"{e} {r.choice(['AND', 'OR', 'and', 'Or'])} {cond(d)}"
    return e
def noise(s):
    if r.random() < NOISE and s:
        i = r.randrange(len(s))
        return s[:i] + r.choice(['(', ')', "'", '!', '=', ',', '.', ' ', '--', '/*', '*/', '\\n', 'L', 'e']) + s[i:]
    return s
NOISE = float(sys.argv[3]) if len(sys.argv) > 3 else 0.1
n = int(sys.argv[1])
for _ in range(n):
    e = noise(expr(2))
    kv = []
    for p in props:
        if r.random() < 0.6:
            kv += [p, r.choice(vals)]
    print('\t'.join([e] + kv))
