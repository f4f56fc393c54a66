# enginex-compat shim package: extends the real package of this name when the image has one.
from compat_shim_overlay import extend

extend(globals())
del extend
