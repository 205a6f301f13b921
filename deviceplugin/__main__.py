import sys

from deviceplugin.cli import main

sys.exit(main())
