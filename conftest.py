"""Root conftest: loads the perfgate plugins (their options and hooks); no logic here.

An installed perfgate registers them too (its pytest11 entry point, perfgate.plugin.autoload, for any
project with [tool.perfgate]); both use the module names, so together they register each once.
This line keeps the suite working where autoloading is off (PYTEST_DISABLE_PLUGIN_AUTOLOAD).
"""

pytest_plugins = ("perfgate.plugin.hooks", "perfgate.plugin.torchrun", "perfgate.plugin.xdist")
