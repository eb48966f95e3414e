"""Settings for every test run, the chapters under nbval included.

One BLAS thread per process. The tests run as parallel processes (pytest-xdist), each
starting notebook kernels, and the course's matrices are small: several BLAS threads per
process would only compete for the same cores (measured: Chapter 8's training ran more than
ten times slower). With one thread the numbers also do not depend on the machine's core count.
The kernels nbval starts inherit these settings.
"""

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
