"""noa's HTTP service: a FastAPI app over :mod:`noa_core.operations` (see :func:`noa_server.app.create_app`)."""

import os

# A BLAS library starts its own thread pool, outside the workers x kernel-threads budget the service
# sets (with OpenBLAS, a thread spinning a whole core after each np.dot in the header statistics).
# Only effective before NumPy is first imported, which ``noa serve`` and ``uvicorn noa_server.app`` ensure.
for _variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
