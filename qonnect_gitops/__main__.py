from qonnect_gitops.cli import main

raise SystemExit(main())
