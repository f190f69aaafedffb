"""evogan's version, in a module of its own: modules inside the package read it from here, never from the
package's ``__init__``, which imports from them (``evogan.load``)."""

__version__ = "0.2.0"
