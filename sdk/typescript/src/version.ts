/** The SDK version, sent in `User-Agent`. Keep in step with package.json. */
export const VERSION = "0.1.0";
