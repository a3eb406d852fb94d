"""Build the compiled TFRecord decoder; everything else is declared in pyproject.toml."""
from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("app.ingest._tfrecord", ["app/ingest/_tfrecord.pyx"], extra_compile_args=["-O3"])],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
    )
)
