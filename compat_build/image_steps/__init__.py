"""Scripts that run inside an image build on the image's own Python: standalone, stdlib only."""
