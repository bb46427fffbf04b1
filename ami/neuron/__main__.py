"""``python -m ami.neuron`` is the same as ``python -m ami.neuron.server``."""
from .server import main

raise SystemExit(main())
