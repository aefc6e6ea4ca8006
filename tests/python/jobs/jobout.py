# SPDX-License-Identifier: Apache-2.0
"""What the job scripts print: one line in one write, since the workers
of a job share the pipe that the test reads."""
import os


def say(*words):
    os.write(1, (" ".join(map(str, words)) + "\n").encode())
