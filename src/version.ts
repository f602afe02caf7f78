/** cohort's version: agents of another version are refused at join. Kept equal to package.json's (a test checks). */
export const VERSION = "0.1.0"
