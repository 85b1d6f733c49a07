"""neuroevo: deep neuroevolution (GA, ES, random search) at the speed of the hardware.

Importing the package is cheap: TensorFlow and the C++ ops load only when a module that needs
them is imported (``neuroevo.envs``, ``neuroevo.models``, ``neuroevo.evaluation``).
"""

__version__ = "0.1.0"
