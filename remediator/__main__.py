from remediator.cli import main

raise SystemExit(main())
