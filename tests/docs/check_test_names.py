#!/usr/bin/python3
"""check_test_names.py SOURCE_ROOT PAGE...

Every test a page names exists.  A page names a test as docs/protocols.md
does beside each rule: the meson test, `layer/module`, then one or more
Criterion tests of its file, `suite::name`:

    (`sync/bsp` `bsp::completes_only_when_every_member_pushed`)

`layer/module` is tests/LAYER/test_MODULE.c, and `suite::name` must be a
Test(suite, name) there (or a ParameterizedTest, or a macro that makes
one, such as BACKEND_TEST(suite, name)).  A `suite::name` takes the last
`layer/module` before it in the same paragraph.  So a test renamed,
moved or deleted without its page fails here, and so does a page that
names no test at all.

Prints each name that does not resolve, with its page and line, and
exits 1; 0 when all do.
"""
import os
import re
import sys

REF = re.compile(r"`([a-z][a-z0-9_]*)/([a-z][a-z0-9_]*)`"
                 r"|`([a-z][a-z0-9_]*)::([a-z][a-z0-9_]*)`")
TEST = re.compile(r"^\s*(?:Test|[A-Z][A-Z0-9_]*TEST)\(\s*(\w+)\s*,\s*(\w+)"
                  r"|^\s*ParameterizedTest\([^,]*,\s*(\w+)\s*,\s*(\w+)",
                  re.M)


def tests_of(root, layer, module, cache):
    key = (layer, module)
    if key not in cache:
        path = os.path.join(root, 'tests', layer, 'test_' + module + '.c')
        try:
            with open(path, encoding='utf-8') as f:
                text = f.read()
        except OSError:
            cache[key] = None
        else:
            cache[key] = {(m[0] or m[2], m[1] or m[3])
                          for m in TEST.findall(text)}
    return cache[key]


def check(root, page, cache):
    errors, count = [], 0
    with open(os.path.join(root, page), encoding='utf-8') as f:
        lines = f.read().split('\n')
    where = None  # the paragraph's last `layer/module`
    for no, line in enumerate(lines, 1):
        if not line.strip():
            where = None
            continue
        for m in REF.finditer(line):
            if m.group(1):
                where = (m.group(1), m.group(2))
                if tests_of(root, *where, cache) is None:
                    errors.append('%s:%d: `%s/%s`: no tests/%s/test_%s.c'
                                  % (page, no, *where, *where))
                continue
            count += 1
            name = (m.group(3), m.group(4))
            if where is None:
                errors.append('%s:%d: `%s::%s` follows no `layer/module`'
                              % (page, no, *name))
                continue
            have = tests_of(root, *where, cache)
            if have is not None and name not in have:
                errors.append('%s:%d: no Test(%s, %s) in tests/%s/test_%s.c'
                              % (page, no, *name, *where))
    if not count:
        errors.append('%s: names no test' % page)
    return errors, count


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    root, cache, errors = sys.argv[1], {}, []
    for page in sys.argv[2:]:
        e, count = check(root, page, cache)
        errors += e
        print('%s: %d tests named' % (page, count))
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
