# The vendor's op namespace: L3 appends `from .<op> import *` here for each of the card's ops.
